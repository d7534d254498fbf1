//! Input asked on a call's stream and answered to another replica, what cannot be asked,
//! abandoned calls, and the 2025-11-25 task list.

use std::time::Duration;

use mcp_tasks_store::{NewTask, Owner, TaskId};
use reqwest::StatusCode;
use serde_json::{Map, Value, json};

use super::{Frames, Session};
use crate::harness::{Replica, TestDb, Worker, eventually, registry};

const WAIT: Duration = Duration::from_secs(20);

async fn status_of(db: &TestDb, id: &str) -> String {
    let mut conn = db.sql().await;
    sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(&mut conn)
        .await
        .expect("task row")
}

/// The id of the only task of `tool`.
async fn task_of(db: &TestDb, tool: &str) -> String {
    let mut conn = db.sql().await;
    sqlx::query_scalar("SELECT id::text FROM tasks WHERE tool = $1")
        .bind(tool)
        .fetch_one(&mut conn)
        .await
        .expect("one task")
}

fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments, "_meta": { "progressToken": "p" } },
    })
}

fn answer_to(request: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": request["id"], "result": result })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_reaches_the_task_through_any_replica_of_its_session() {
    let db = TestDb::new().await;
    let a = Replica::start(&db.store, registry("conformance")).await;
    let b = Replica::start(&db.store, registry("conformance")).await;
    let worker = Worker::start(&db.store, registry("conformance"));
    let s = Session::open(&a.url, "2025-06-18", json!({ "elicitation": {} }), "alice").await;
    let mut stream = Frames::new(
        s.raw(&call(1, "confirm_delete", json!({ "filename": "f" })))
            .await,
    );
    let progress = stream.until("notifications/progress").await;
    assert_eq!(progress["params"]["progressToken"], "p", "{progress}");
    let ask = stream.until("elicitation/create").await;
    assert!(ask["id"].is_string(), "{ask}");
    assert_eq!(ask["params"]["message"], "Delete f?", "{ask}");
    assert!(
        ask["params"]["requestedSchema"]["properties"]["confirm"].is_object(),
        "{ask}"
    );
    assert!(
        ask["params"].get("mode").is_none(),
        "2025-06-18 has no mode: {ask}"
    );
    let id = task_of(&db, "confirm_delete").await;
    assert_eq!(status_of(&db, &id).await, "input_required");

    let on_b = s.at(&b.url);
    let yes = json!({ "action": "accept", "content": { "confirm": true } });
    // Not ours: an altered id, a number, the right id from another session.
    let mut altered = ask.clone();
    let raw = ask["id"].as_str().unwrap_or_default();
    let last = if raw.ends_with('A') { "B" } else { "A" };
    altered["id"] = json!(format!("{}{last}", &raw[..raw.len() - 1]));
    let other = Session::open(&b.url, "2025-06-18", json!({ "elicitation": {} }), "alice").await;
    for (what, who, message) in [
        ("altered id", &on_b, answer_to(&altered, yes.clone())),
        (
            "number id",
            &on_b,
            json!({ "jsonrpc": "2.0", "id": 7, "result": yes }),
        ),
        ("another session", &other, answer_to(&ask, yes.clone())),
    ] {
        let refused = who.send(&message).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{what}: {}",
            refused.body
        );
        assert!(refused.body.get("id").is_none(), "{what}: {}", refused.body);
    }
    assert_eq!(
        status_of(&db, &id).await,
        "input_required",
        "nothing was applied"
    );

    let accepted = on_b.send(&answer_to(&ask, yes.clone())).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.body);
    let response = stream.response().await;
    assert_eq!(response["id"], 1, "{response}");
    assert_eq!(
        response["result"]["content"][0]["text"], "Deleted f.",
        "{response}"
    );
    assert!(response["result"].get("resultType").is_none(), "{response}");
    assert_eq!(status_of(&db, &id).await, "completed");
    // A late duplicate changes nothing.
    let again = on_b
        .send(&answer_to(&ask, json!({ "action": "decline" })))
        .await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.body);
    assert_eq!(status_of(&db, &id).await, "completed");

    worker.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_or_an_unfit_answer_ends_the_call() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("demo")).await;
    let worker = Worker::start(&db.store, registry("demo"));
    let s = Session::open(
        &replica.url,
        "2025-11-25",
        json!({ "elicitation": {} }),
        "alice",
    )
    .await;
    for (n, answer) in [
        json!({ "jsonrpc": "2.0", "error": { "code": -32603, "message": "no user" } }),
        json!({ "jsonrpc": "2.0", "result": { "action": "accept", "content": { "approved": "yes" } } }),
    ]
    .into_iter()
    .enumerate()
    {
        let n = i64::try_from(n).unwrap_or(0);
        let mut stream = Frames::new(
            s.raw(&call(n, "generate_report", json!({ "size": "small" })))
                .await,
        );
        let ask = stream.until("elicitation/create").await;
        assert_eq!(ask["params"]["mode"], "form", "2025-11-25 names the mode: {ask}");
        let mut answer = answer;
        answer["id"] = ask["id"].clone();
        let sent = s.send(&answer).await;
        let expected = if n == 0 {
            StatusCode::ACCEPTED
        } else {
            StatusCode::BAD_REQUEST
        };
        assert_eq!(sent.status, expected, "answer {n}: {}", sent.body);
        let response = stream.response().await;
        assert_eq!(response["error"]["code"], -32603, "answer {n}: {response}");
    }
    let mut conn = db.sql().await;
    let cancelled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE tool = 'generate_report' AND status = 'cancelled'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("count");
    assert_eq!(cancelled, 2, "nobody could answer them any more");
    worker.stop().await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_a_session_cannot_give_is_never_asked() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    for (version, caps) in [
        // 2025-03-26 has no elicitation, whatever the client says.
        ("2025-03-26", json!({ "elicitation": {} })),
        ("2025-06-18", json!({})),
    ] {
        let s = Session::open(&replica.url, version, caps, version).await;
        // confirm_delete declares that it asks for form input: refused before any task
        // exists, with what the client would have to declare.
        let answer = s
            .raw(&call(1, "confirm_delete", json!({ "filename": version })))
            .await;
        assert_eq!(answer.status(), 200, "{version}");
        let response: Value = answer.json().await.expect("a JSON response");
        assert_eq!(response["error"]["code"], -32021, "{version}: {response}");
        assert_eq!(
            response["error"]["data"]["requiredCapabilities"],
            json!({ "elicitation": {} }),
            "{version}: {response}"
        );
        let mut conn = db.sql().await;
        let tasks: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE arguments->>'filename' = $1")
                .bind(version)
                .fetch_one(&mut conn)
                .await
                .expect("count");
        assert_eq!(tasks, 0, "{version}: no task for a refused call");
    }
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_call_cancels_its_task_unless_it_can_be_picked_up() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let worker = Worker::start(&db.store, registry("conformance"));
    let s = Session::open(&replica.url, "2025-06-18", json!({}), "alice").await;
    let long =
        |id: i64, label: &str| call(id, "slow_compute", json!({ "seconds": 60, "label": label }));
    let mut stream = Frames::new(s.raw(&long(1, "dropped")).await);
    stream.until("notifications/progress").await;
    drop(stream);
    let keyed = s
        .http
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &s.id)
        .header("x-test-principal", "alice")
        .header("idempotency-key", "keep-me")
        .body(long(2, "kept").to_string())
        .send()
        .await
        .expect("POST");
    let mut kept = Frames::new(keyed);
    kept.until("notifications/progress").await;
    drop(kept);

    let mut conn = db.sql().await;
    let id_of = |label: &'static str| {
        sqlx::query_scalar::<_, String>("SELECT id::text FROM tasks WHERE arguments->>'label' = $1")
            .bind(label)
    };
    let dropped = id_of("dropped").fetch_one(&mut conn).await.expect("task");
    let kept_id = id_of("kept").fetch_one(&mut conn).await.expect("task");
    eventually(WAIT, "the abandoned task to be cancelled", || async {
        (status_of(&db, &dropped).await == "cancelled").then_some(())
    })
    .await;
    assert_eq!(
        status_of(&db, &kept_id).await,
        "working",
        "a keyed call can be made again"
    );
    worker.stop().await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_list_pages_through_the_callers_own_tasks() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let task = || NewTask {
        tool: "slow_compute".into(),
        arguments: json!({ "seconds": 1 }),
        status_message: None,
        ttl_ms: Some(3_600_000),
        poll_interval_ms: Some(500),
        retention_ms: 60_000,
        max_attempts: 3,
        input_responses: Map::new(),
        trace_context: None,
        client_capabilities: None,
        idempotency: None,
    };
    let (alice, bob) = (Owner::new("default", "alice"), Owner::new("default", "bob"));
    let mut mine = Vec::new();
    for _ in 0..53 {
        mine.push(
            db.store
                .replica()
                .create_task(&alice, task())
                .await
                .expect("create")
                .id
                .to_string(),
        );
    }
    let theirs = db
        .store
        .replica()
        .create_task(&bob, task())
        .await
        .expect("create")
        .id;
    let s = Session::open(&replica.url, "2025-11-25", json!({}), "alice").await;

    let first = s.result(1, "tasks/list", json!({})).await;
    let page: Vec<String> = ids(&first);
    assert_eq!(page.len(), 50, "{first}");
    let cursor = first["nextCursor"]
        .as_str()
        .expect("a next cursor")
        .to_owned();
    let second = s.result(2, "tasks/list", json!({ "cursor": cursor })).await;
    assert!(second.get("nextCursor").is_none(), "{second}");
    let mut listed = page;
    listed.extend(ids(&second));
    assert_eq!(listed, mine, "every task once, in creation order");
    assert_eq!(first["tasks"][0]["status"], "working", "{first}");
    assert!(first["tasks"][0]["ttl"].is_i64(), "{first}");

    let bad = s
        .error(3, "tasks/list", json!({ "cursor": "nope" }), 200)
        .await;
    assert_eq!(bad["code"], -32602, "{bad}");
    // Bob's task is no more visible than one that never existed.
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let foreign = s
            .error(4, method, json!({ "taskId": theirs.to_string() }), 200)
            .await;
        let unknown = s
            .error(
                4,
                method,
                json!({ "taskId": TaskId::random().to_string() }),
                200,
            )
            .await;
        assert_eq!(foreign, unknown, "{method}");
        assert_eq!(foreign["code"], -32602, "{method}: {foreign}");
    }
    replica.stop().await;
}

fn ids(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["taskId"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
