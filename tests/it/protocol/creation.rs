//! Task creation: the shape of a created task and its durability across replicas, and the
//! synchronous fallback for clients without the Tasks extension.

use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::{Value, json};

use super::{exchange_error, exchange_result};
use crate::harness::spec::{RELATED_TASK, SERVER_INFO, TASKS, text_of};
use crate::harness::{TestApp, status, task_id};

fn assert_timestamp(v: &Value, what: &str) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{what} must be a string: {v}"));
    assert!(s.ends_with('Z'), "{what} must be UTC with Z: {s}");
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{what} is not RFC 3339 ({e}): {s}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_task_is_durable_and_well_formed() {
    let app = TestApp::builder().replicas(2).workers(1).start().await;
    let (one, two) = (&app.replicas[0], &app.replicas[1]);

    let ex = one
        .client("alice")
        .send(
            json!("create"),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1, "label": "durable" } }),
        )
        .await
        .expect("tools/call");
    assert_eq!(
        ex.body.as_ref().and_then(|b| b.get("id")),
        Some(&json!("create"))
    );
    let created = exchange_result(ex, "create");
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    let id = task_id(&created);
    assert!(
        created["ttlMs"].as_u64().is_some_and(|t| t > 0),
        "ttlMs must be a positive integer: {created}"
    );
    assert!(
        created["pollIntervalMs"].as_u64().is_some_and(|t| t > 0),
        "pollIntervalMs must be positive: {created}"
    );
    assert_timestamp(&created["createdAt"], "createdAt");
    assert_timestamp(&created["lastUpdatedAt"], "lastUpdatedAt");
    for absent in [
        "result",
        "error",
        "inputRequests",
        "requestState",
        "task",
        "ttl",
        "pollInterval",
    ] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }

    // Readable at once through another replica.
    let got = two
        .client("alice")
        .get_task(&id)
        .await
        .expect("tasks/get on another replica right after creation");
    assert_eq!(got["resultType"], "complete", "{got}");
    assert_eq!(got["taskId"], json!(id));
    assert_eq!(got["createdAt"], created["createdAt"]);
    assert!(matches!(status(&got), "working" | "completed"), "{got}");

    let done = two
        .client("alice")
        .wait_terminal(&id, Duration::from_secs(30))
        .await
        .expect("terminal");
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["resultType"], "complete", "{done}");
    let result = &done["result"];
    assert!(
        result["content"].as_array().is_some_and(|c| !c.is_empty()),
        "{done}"
    );
    assert_eq!(text_of(result), "Computed durable in 1 s.");
    assert_eq!(result["resultType"], "complete", "{done}");
    assert!(result["_meta"][SERVER_INFO]["name"].is_string(), "{done}");
    assert!(result["_meta"].get(RELATED_TASK).is_none(), "{done}");
    for absent in ["error", "inputRequests", "requestState"] {
        assert!(done.get(absent).is_none(), "{absent} in {done}");
    }

    app.stop().await;
}

// ---------------------------------------------------------------------------------------
// Synchronous fallback for clients without the extension
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_extension_get_plain_results_or_32021() {
    let app = TestApp::start(1).await;
    let (db, replica) = (&app.db, app.replica());
    let plain =
        Client::new(&replica.url, json!({ "elicitation": {} })).header("x-test-principal", "alice");

    let ex = plain
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1, "label": "sync" } }),
        )
        .await
        .expect("tools/call");
    let result = exchange_result(ex, "slow_compute without the extension");
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("taskId").is_none(), "{result}");
    assert!(result.get("status").is_none(), "{result}");
    assert!(
        result["content"].as_array().is_some_and(|c| !c.is_empty()),
        "{result}"
    );
    assert_eq!(text_of(&result), "Computed sync in 1 s.");
    // It really ran on the worker.
    let mut conn = db.sql().await;
    let ran: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE tool = 'slow_compute' AND status = 'completed'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("count");
    assert_eq!(ran, 1);

    let ex = plain
        .send(
            json!("f"),
            "tools/call",
            json!({ "name": "failing_job", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    let e = exchange_error(
        &ex,
        "failing_job without the extension",
        400,
        -32021,
        &json!("f"),
    );
    assert_eq!(
        e["data"]["requiredCapabilities"]["extensions"][TASKS],
        json!({}),
        "{e}"
    );
    let created: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE tool = 'failing_job'")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(created, 0, "a refused call must not create a task");

    // A legacy task param is ignored, with and without the extension.
    for client in [&plain, &replica.client("alice")] {
        let result = client
            .request(
                "tools/call",
                json!({ "name": "greet", "arguments": { "name": "x" }, "task": { "ttl": 1000 } }),
            )
            .await
            .expect("greet");
        assert_eq!(result["resultType"], "complete", "{result}");
        assert!(result.get("taskId").is_none(), "{result}");
        assert_eq!(text_of(&result), "Hello, x!");
    }

    app.stop().await;
}
