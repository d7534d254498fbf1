//! Negotiation, session ids refused as the 2025 transport says, ending a session for
//! every replica, and errors in 2025 form.

use std::time::Duration;

use mcp_tasks_server::{ServerConfig, StateKeys};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgConnection;

use super::{Session, answer, http, initialize_body, post};
use crate::harness::replica::state_keys;
use crate::harness::{Replica, TestDb, eventually, registry, server_config};

const VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_is_answered_in_each_2025_revision() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    for version in VERSIONS {
        let s = Session::open(&replica.url, version, json!({ "elicitation": {} }), "alice").await;
        let init = answer(
            post(
                &s.http,
                &replica.url,
                &[],
                &initialize_body(version, json!({})),
            )
            .await,
        )
        .await;
        let result = &init.body["result"];
        assert_eq!(init.content_type, "application/json", "{version}");
        assert_eq!(result["protocolVersion"], version);
        assert_eq!(result["serverInfo"]["name"], "mcp-tasks-test", "{result}");
        assert!(result["capabilities"]["tools"].is_object(), "{result}");
        assert!(
            result["capabilities"].get("extensions").is_none(),
            "{result}"
        );
        assert!(result.get("resultType").is_none(), "{result}");
        assert_eq!(
            result["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
            version == "2025-11-25",
            "tasks only at 2025-11-25: {result}"
        );
        assert!(
            init.session.is_some_and(|id| id != s.id),
            "every session is new"
        );

        assert_eq!(s.result(1, "ping", json!({})).await, json!({}));
        let tools = s.result(2, "tools/list", json!({})).await;
        assert!(tools.get("resultType").is_none(), "{tools}");
        let slow = tools["tools"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == "slow_compute"))
            .cloned()
            .unwrap_or_default();
        let greet = tools["tools"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == "greet"))
            .cloned()
            .unwrap_or_default();
        if version == "2025-11-25" {
            assert_eq!(slow["execution"]["taskSupport"], "optional", "{slow}");
        } else {
            assert!(slow.get("execution").is_none(), "{version}: {slow}");
        }
        assert!(greet.get("execution").is_none(), "{greet}");

        let greeting = s
            .result(
                3,
                "tools/call",
                json!({ "name": "greet", "arguments": { "name": "x" } }),
            )
            .await;
        assert_eq!(greeting["content"][0]["text"], "Hello, x!", "{greeting}");
        assert!(greeting.get("resultType").is_none(), "{greeting}");
        assert_eq!(s.delete().await, StatusCode::NO_CONTENT, "{version}");
    }

    // Asking for 2026-07-28, or a version no session speaks, gets today's answer: the
    // latest version, 2026-07-28, and no session.
    for asked in ["2026-07-28", "2024-11-05", "1999-01-01"] {
        let a = answer(
            post(
                &http(),
                &replica.url,
                &[],
                &initialize_body(asked, json!({})),
            )
            .await,
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{asked}");
        assert_eq!(a.body["result"]["protocolVersion"], "2026-07-28", "{asked}");
        assert!(a.session.is_none(), "{asked}: no session");
    }
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_serves_a_session_and_refuses_what_is_not_one() {
    let db = TestDb::new().await;
    let a = Replica::start(&db.store, registry("conformance")).await;
    let b = Replica::start(&db.store, registry("conformance")).await;
    let other_key = Replica::start_with(
        &db.store,
        registry("conformance"),
        server_config(),
        StateKeys::parse(&"cd".repeat(32)).expect("key"),
    )
    .await;
    let s = Session::open(&a.url, "2025-06-18", json!({}), "alice").await;
    let on_b = s.at(&b.url);
    assert!(on_b.result(1, "tools/list", json!({})).await["tools"].is_array());

    let not_found = |what: &str, answer: &super::Answer| {
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{what}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["error"]["code"], -32600,
            "{what}: {}",
            answer.body
        );
    };
    // Altered, signed with another key, someone else's, or garbage: 404, alike.
    let mut forged = s.clone();
    let last = if s.id.ends_with('A') { "B" } else { "A" };
    forged.id = format!("{}{last}", &s.id[..s.id.len() - 1]);
    let forged_answer = forged.rpc(2, "tools/list", json!({})).await;
    not_found("altered", &forged_answer);
    not_found(
        "other key",
        &s.at(&other_key.url).rpc(3, "tools/list", json!({})).await,
    );
    let mut mallory = s.clone();
    mallory.principal = "mallory".into();
    let foreign = mallory.rpc(4, "tools/list", json!({})).await;
    not_found("foreign", &foreign);
    assert_eq!(
        foreign.body["error"], forged_answer.body["error"],
        "someone else's session looks like a forged one"
    );
    let mut garbage = s.clone();
    garbage.id = "not-a-session".into();
    not_found("garbage", &garbage.rpc(5, "tools/list", json!({})).await);
    not_found(
        "notification",
        &forged
            .send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await,
    );

    // No session id where one is needed (a 2025 version, no `_meta`): 400.
    let missing = answer(
        post(
            &http(),
            &a.url,
            &[("mcp-protocol-version", "2025-06-18")],
            &json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/list" }),
        )
        .await,
    )
    .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{}", missing.body);
    assert!(
        missing.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Mcp-Session-Id")),
        "{}",
        missing.body
    );
    // A protocol version header that is not the session's: 400.
    let mut other_version = s.clone();
    other_version.version = "2025-11-25".into();
    let mismatch = other_version.rpc(7, "tools/list", json!({})).await;
    assert_eq!(
        mismatch.status,
        StatusCode::BAD_REQUEST,
        "{}",
        mismatch.body
    );

    // No GET stream: 405, naming what the endpoint allows.
    let get = s
        .http
        .get(&a.url)
        .header("mcp-session-id", &s.id)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET");
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get.headers()["allow"], "POST, DELETE");

    // Ended on B: refused on A and B alike from then on, and ending it again is 404.
    assert_eq!(on_b.delete().await, StatusCode::NO_CONTENT);
    not_found("ended, on A", &s.rpc(8, "tools/list", json!({})).await);
    not_found("ended, on B", &on_b.rpc(9, "ping", json!({})).await);
    assert_eq!(s.delete().await, StatusCode::NOT_FOUND);
    let mut conn = db.sql().await;
    let rows = count(&mut conn, "SELECT count(*) FROM session_revocations").await;
    assert_eq!(rows, 1);

    for r in [a, b, other_key] {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_are_bounded_per_principal() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_session_revocations = 3;
    let replica = conformance_replica(&db, config).await;
    let mut sessions = Vec::new();
    for _ in 0..6 {
        sessions.push(Session::open(&replica.url, "2025-11-25", json!({}), "alice").await);
    }
    let bob = Session::open(&replica.url, "2025-11-25", json!({}), "bob").await;
    let mut conn = db.sql().await;
    for (i, s) in sessions.iter().take(3).enumerate() {
        assert_eq!(s.delete().await, StatusCode::NO_CONTENT, "session {i}");
    }
    let rows = count(
        &mut conn,
        "SELECT count(*) FROM session_revocations WHERE session <> '*'",
    )
    .await;
    assert_eq!(rows, 3, "one row per ended session, up to the limit");
    assert_eq!(
        sessions[4].rpc(1, "ping", json!({})).await.status,
        StatusCode::OK
    );
    // The fourth ends every earlier session of alice at once, in one row.
    assert_eq!(sessions[3].delete().await, StatusCode::NO_CONTENT);
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "SELECT session, revoked_before IS NOT NULL FROM session_revocations WHERE principal = 'alice'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("rows");
    assert_eq!(rows, vec![("*".to_owned(), true)], "bounded: {rows:?}");
    for (i, s) in sessions.iter().enumerate() {
        let status = s.rpc(2, "ping", json!({})).await.status;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "alice's session {i} was issued before"
        );
    }
    assert_eq!(
        bob.rpc(3, "ping", json!({})).await.status,
        StatusCode::OK,
        "bob's is his own"
    );
    let fresh = Session::open(&replica.url, "2025-11-25", json!({}), "alice").await;
    assert_eq!(fresh.rpc(4, "ping", json!({})).await.status, StatusCode::OK);
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_and_maintenance_forgets_their_ends() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.session_ttl = Duration::from_secs(3);
    let replica = conformance_replica(&db, config).await;
    let ended = Session::open(&replica.url, "2025-06-18", json!({}), "alice").await;
    let s = Session::open(&replica.url, "2025-06-18", json!({}), "alice").await;
    assert_eq!(ended.delete().await, StatusCode::NO_CONTENT);
    eventually(Duration::from_secs(30), "the session to expire", || async {
        (s.rpc(1, "ping", json!({})).await.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    let mut conn = db.sql().await;
    let before = count(&mut conn, "SELECT count(*) FROM session_revocations").await;
    let forgotten = eventually(
        Duration::from_secs(30),
        "the revocation to lapse",
        || async {
            let r = db
                .store
                .worker()
                .maintain(100, 60_000)
                .await
                .expect("maintain");
            (r.session_revocations_deleted > 0).then_some(r.session_revocations_deleted)
        },
    )
    .await;
    assert_eq!(i64::try_from(forgotten).unwrap_or(-1), before);
    let after = count(&mut conn, "SELECT count(*) FROM session_revocations").await;
    assert_eq!(after, 0);
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_take_the_2025_form_and_2026_requests_keep_theirs() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let old = Session::open(&replica.url, "2025-06-18", json!({}), "alice").await;
    let new = Session::open(
        &replica.url,
        "2025-11-25",
        json!({ "elicitation": {} }),
        "alice",
    )
    .await;
    // In a session a JSON-RPC error is an HTTP 200 (404 would say the session is gone).
    for method in [
        "server/discover",
        "subscriptions/listen",
        "tasks/update",
        "logging/setLevel",
        "foo/bar",
    ] {
        let e = new.error(1, method, json!({}), 200).await;
        assert_eq!(e["code"], -32601, "{method}: {e}");
    }
    for method in ["tasks/get", "tasks/list", "tasks/result", "tasks/cancel"] {
        let e = old.error(2, method, json!({ "taskId": "x" }), 200).await;
        assert_eq!(e["code"], -32601, "2025-06-18 has no {method}: {e}");
    }
    let e = call_error(&new, 3, "nope", json!({})).await;
    assert_eq!(e["code"], -32602, "{e}");
    let e = call_error(&new, 4, "greet", json!({ "name": 5 })).await;
    assert_eq!(e["code"], -32602, "{e}");
    // A task-required tool without a task; a sync-only one with a task.
    let e = call_error(&new, 5, "failing_job", json!({})).await;
    assert_eq!(e["code"], -32601, "{e}");
    let e = call_error(&old, 6, "failing_job", json!({})).await;
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("2025-06-18 has no tasks")),
        "{e}"
    );
    let e = new
        .error(
            7,
            "tools/call",
            json!({ "name": "greet", "arguments": { "name": "x" }, "task": {} }),
            200,
        )
        .await;
    assert_eq!(e["code"], -32601, "{e}");
    // A tool that asks for input before any task exists cannot run in a session.
    let e = call_error(&new, 8, "test_tool_with_task", json!({})).await;
    assert_eq!(e["code"], -32600, "{e}");
    let e = call_error(&old, 9, "test_tool_with_task", json!({})).await;
    assert_eq!(
        e["code"], -32021,
        "and without elicitation it could not even be asked: {e}"
    );
    let mut conn = db.sql().await;
    let tasks = count(&mut conn, "SELECT count(*) FROM tasks").await;
    assert_eq!(tasks, 0, "none of these created a task");

    // The 2025-11-25 tasks methods are not 2026-07-28 methods.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
    });
    for method in ["tasks/list", "tasks/result", "ping"] {
        let a = answer(
            post(
                &http(),
                &replica.url,
                &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", method)],
                &json!({ "jsonrpc": "2.0", "id": 9, "method": method, "params": { "taskId": "x", "_meta": meta } }),
            )
            .await,
        )
        .await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{method}: {}", a.body);
        assert_eq!(a.body["error"]["code"], -32601, "{method}: {}", a.body);
    }
    replica.stop().await;
}

/// A replica of the conformance pack on `db` with `config`, and the usual state keys.
async fn conformance_replica(db: &TestDb, config: ServerConfig) -> Replica {
    Replica::start_with(&db.store, registry("conformance"), config, state_keys()).await
}

/// The one number `sql` (a `SELECT count(*)`) answers.
async fn count(conn: &mut PgConnection, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The JSON-RPC error (in an HTTP 200: the session lives on) of a `tools/call` in `s`.
async fn call_error(s: &Session, id: i64, tool: &str, arguments: Value) -> Value {
    s.error(
        id,
        "tools/call",
        json!({ "name": tool, "arguments": arguments }),
        200,
    )
    .await
}
