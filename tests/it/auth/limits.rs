//! Limits per principal: the request rate (and a polling client that backs off is never
//! throttled), tasks in flight, argument and answer sizes, JSON nesting.

use std::time::{Duration, Instant};

use mcp_tasks_server::RateLimit;
use mcp_tasks_wire::{PROTOCOL_VERSION, meta_keys};
use serde_json::{Value, json};

use super::{discover_with, post_body, user_name};
use crate::harness::http::Answer;
use crate::harness::{TestApp, status, task_id};

fn principal(who: &str) -> [(&'static str, String); 1] {
    [("x-test-principal", who.to_owned())]
}

fn retry_after(raw: &Answer) -> u64 {
    raw.header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {raw:?}"))
        .parse()
        .expect("Retry-After in seconds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_is_per_principal_and_says_when_to_come_back() {
    let app = TestApp::builder()
        .config(|config| {
            // A burst of 5, refilled at one per 5 s: the 6th request is over unless the
            // first six took 5 s (at 2 per second, a loaded machine's 0.5 s refilled one).
            config.rate_limit = Some(RateLimit {
                per_second: 0.2,
                burst: 5.0,
            });
        })
        .random_state_keys()
        .start()
        .await;
    let replica = app.replica();

    for i in 0..5 {
        let raw = discover_with(&replica.url, &principal("alice")).await;
        assert_eq!(raw.status, 200, "request {}: {}", i + 1, raw.text());
    }
    let refused = discover_with(&replica.url, &principal("alice")).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    let wait = retry_after(&refused);
    assert!(wait >= 1, "Retry-After {wait}");
    let e = refused.json();
    assert_eq!(e["jsonrpc"], "2.0", "{e}");
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert_eq!(e["error"]["data"]["limit"], "requests_per_second", "{e}");
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too many requests") && message.contains("limit 0.2 per second"),
        "{e}"
    );

    // Someone else is not affected.
    let bob = discover_with(&replica.url, &principal("bob")).await;
    assert_eq!(bob.status, 200, "{}", bob.text());

    // After the advertised wait, alice is served again.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let again = discover_with(&replica.url, &principal("alice")).await;
    assert_eq!(again.status, 200, "{}", again.text());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_polling_with_backoff_is_never_throttled_by_the_default_limit() {
    let app = TestApp::builder()
        .config(|config| {
            config.rate_limit = Some(RateLimit::default());
        })
        .random_state_keys()
        .start()
        .await;
    let replica = app.replica();
    let alice = replica.client("alice");
    // Four tasks, polled together, as a client with several tasks in flight would.
    let mut ids = Vec::new();
    for _ in 0..4 {
        let created = alice
            .call_tool("slow_compute", json!({ "seconds": 30 }))
            .await
            .expect("tools/call");
        ids.push(task_id(&created));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut every = Duration::from_millis(20);
    let mut polls = 0;
    while Instant::now() < deadline {
        for id in &ids {
            let ex = alice
                .send(json!(polls), "tasks/get", json!({ "taskId": id }))
                .await
                .expect("tasks/get");
            assert_eq!(ex.status, 200, "poll {polls} throttled: {:?}", ex.body);
            polls += 1;
        }
        tokio::time::sleep(every).await;
        every = (every * 3 / 2).min(Duration::from_secs(1));
    }
    assert!(polls >= 40, "only {polls} polls in 5 s");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_in_flight_are_limited_per_principal() {
    let app = TestApp::builder()
        .config(|config| {
            config.max_tasks_in_flight = 2;
        })
        .random_state_keys()
        .start()
        .await;
    let (db, replica) = (&app.db, app.replica());
    let alice = replica.client("alice");
    let create = || {
        alice.send(
            json!("create"),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 30 } }),
        )
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let ex = create().await.expect("tools/call");
        assert_eq!(ex.status, 200, "{:?}", ex.body);
        ids.push(task_id(&ex.into_result().expect("task")));
    }

    let third = create().await.expect("tools/call");
    assert_eq!(third.status, 429, "{:?}", third.body);
    assert!(
        third.headers.contains_key("retry-after"),
        "{:?}",
        third.headers
    );
    let body = third.body.clone().expect("body");
    assert_eq!(body["id"], "create", "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["limit"], "tasks_in_flight", "{body}");
    assert_eq!(body["error"]["data"]["max"], 2, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too many unfinished tasks") && message.contains("limit 2"),
        "{body}"
    );
    assert_eq!(
        db.count_tasks("true").await,
        2,
        "the refused call created nothing"
    );

    // Per principal: bob is not affected.
    let bob = replica.client("bob");
    let created = bob
        .call_tool("slow_compute", json!({ "seconds": 30 }))
        .await
        .expect("bob's task");
    assert_eq!(created["resultType"], "task", "{created}");

    // Once one of alice's tasks is cancelled, she may start another, and only one.
    alice.cancel_task(&ids[0]).await.expect("cancel");
    assert_eq!(
        status(&alice.get_task(&ids[0]).await.expect("get")),
        "cancelled"
    );
    let ex = create().await.expect("tools/call");
    assert_eq!(ex.status, 200, "{:?}", ex.body);
    assert_eq!(ex.into_result().expect("task")["resultType"], "task");
    let ex = create().await.expect("tools/call");
    assert_eq!(ex.status, 429, "{:?}", ex.body);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_never_exceed_the_tasks_in_flight_limit() {
    let app = TestApp::builder()
        .config(|config| {
            config.max_tasks_in_flight = 2;
        })
        .random_state_keys()
        .start()
        .await;
    let (db, replica) = (&app.db, app.replica());
    let alice = replica.client("alice");
    // Several rounds of 16 simultaneous creations, each on a clean slate.
    for round in 0..5 {
        let calls = (0..16).map(|i| {
            alice.send(
                json!(i),
                "tools/call",
                json!({ "name": "slow_compute", "arguments": { "seconds": 30 } }),
            )
        });
        let statuses: Vec<u16> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|ex| ex.expect("tools/call").status)
            .collect();
        let accepted = statuses.iter().filter(|s| **s == 200).count();
        let mut conn = db.sql().await;
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tasks WHERE principal = 'alice' AND finished_at IS NULL",
        )
        .fetch_one(&mut conn)
        .await
        .expect("count");
        assert!(
            accepted <= 2 && live <= 2,
            "round {round}: {accepted} of 16 simultaneous creations accepted, {live} unfinished \
             tasks, with a limit of 2: {statuses:?}"
        );
        assert_eq!(accepted, 2, "round {round}: {statuses:?}");
        let unfinished: Vec<uuid::Uuid> =
            sqlx::query_scalar("SELECT id FROM tasks WHERE finished_at IS NULL")
                .fetch_all(&mut conn)
                .await
                .expect("ids");
        for id in unfinished {
            alice
                .cancel_task(&id.to_string())
                .await
                .expect("clean slate");
        }
    }
    app.stop().await;
}

fn assert_too_large(ex: &mcp_tasks_client::Exchange, what: &str, param: &str, size: usize) {
    assert_eq!(ex.status, 200, "{what}: {:?}", ex.body);
    let body = ex.body.clone().expect("body");
    assert_eq!(body["error"]["code"], -32602, "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("params.{param} is {size} bytes"))
            && message.contains("the limit is 1024"),
        "{what}: the message must state the size ({size}) and the limit: {body}"
    );
    assert_eq!(body["error"]["data"]["limit"], param, "{what}: {body}");
    assert_eq!(body["error"]["data"]["max"], 1024, "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_and_input_responses_are_size_limited() {
    let app = TestApp::builder()
        .config(|config| {
            config.max_argument_bytes = 1024;
            config.max_input_response_bytes = 1024;
        })
        .random_state_keys()
        .start()
        .await;
    let (db, replica) = (&app.db, app.replica());
    let alice = replica.client("alice");

    // Arguments: under the limit is fine, 2 KiB is not.
    let small = json!({ "seconds": 30, "label": "x".repeat(900) });
    let created = alice
        .call_tool("slow_compute", small)
        .await
        .expect("a 0.9 KiB argument");
    let id = task_id(&created);
    let large = json!({ "seconds": 30, "label": "x".repeat(2048) });
    let size = large.to_string().len();
    let ex = alice
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": large }),
        )
        .await
        .expect("tools/call");
    assert_too_large(&ex, "2 KiB of arguments", "arguments", size);
    assert_eq!(db.count_tasks("true").await, 1);

    // inputResponses on tasks/update.
    let responses = user_name(&"y".repeat(2048));
    let size = responses.to_string().len();
    let ex = alice
        .send(
            json!(2),
            "tasks/update",
            json!({ "taskId": id, "inputResponses": responses }),
        )
        .await
        .expect("tasks/update");
    assert_too_large(
        &ex,
        "2 KiB of inputResponses on tasks/update",
        "inputResponses",
        size,
    );

    // inputResponses on an MRTR round 2.
    let round_one = alice
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("round 1");
    assert_eq!(round_one["resultType"], "input_required", "{round_one}");
    let state = round_one["requestState"].as_str().expect("requestState");
    let round_two = |responses: Value| {
        json!({
            "name": "test_tool_with_task",
            "arguments": {},
            "inputResponses": responses,
            "requestState": state,
        })
    };
    let ex = alice
        .send(json!(3), "tools/call", round_two(responses.clone()))
        .await
        .expect("round 2");
    assert_too_large(
        &ex,
        "2 KiB of inputResponses on round 2",
        "inputResponses",
        size,
    );
    assert_eq!(
        db.count_tasks("true").await,
        1,
        "the refused round 2 created nothing"
    );
    let created = alice
        .request("tools/call", round_two(user_name("Alice")))
        .await
        .expect("a small round 2");
    assert_eq!(created["resultType"], "task", "{created}");
    app.stop().await;
}

/// Deepest nesting of arrays and objects in `json` (outside strings).
fn nesting(json: &str) -> usize {
    let value: Value = serde_json::from_str(json).expect("JSON");
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    depth(&value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nesting_is_limited() {
    let app = TestApp::builder()
        .config(|config| {
            config.json_limits.max_depth = 8;
        })
        .random_state_keys()
        .start()
        .await;
    let replica = app.replica();
    // The envelope is level 1 and params level 2; `pad` brings the rest.
    let body = |levels: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{{"_meta":{{"{}":"{}","{}":{{}}}},"pad":{}1{}}}}}"#,
            meta_keys::PROTOCOL_VERSION,
            PROTOCOL_VERSION,
            meta_keys::CLIENT_CAPABILITIES,
            "[".repeat(levels - 2),
            "]".repeat(levels - 2),
        )
    };
    let headers = principal("alice");

    let eight = body(8);
    assert_eq!(nesting(&eight), 8);
    let raw = post_body(&replica.url, &headers, "server/discover", eight).await;
    assert_eq!(raw.status, 200, "depth 8: {}", raw.text());
    assert!(raw.json()["result"].is_object(), "{}", raw.text());

    let nine = body(9);
    assert_eq!(nesting(&nine), 9);
    let raw = post_body(&replica.url, &headers, "server/discover", nine).await;
    assert_eq!(raw.status, 400, "depth 9: {}", raw.text());
    let e = raw.json();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("deeper than 8"),
        "{e}"
    );
    app.stop().await;
}
