//! Ownership: another owner cannot tell a task from one that never existed, and cannot
//! change it.

use serde_json::{Value, json};

use super::{assert_error, assert_result, fresh_id};
use crate::harness::http::{self, Request};
use crate::harness::spec::TASKS;
use crate::harness::{TestApp, TestDb, status, task_id};

async fn task_row(db: &TestDb, id: &str) -> (String, i64, bool) {
    let mut conn = db.sql().await;
    sqlx::query_as::<_, (String, i64, bool)>(
        "SELECT status, version, cancel_requested_at IS NULL FROM tasks WHERE id = $1",
    )
    .bind(uuid::Uuid::parse_str(id).expect("uuid"))
    .fetch_one(&mut conn)
    .await
    .expect("task row")
}

fn task_params(method: &str, id: &str) -> Value {
    match method {
        "tasks/update" => json!({ "taskId": id, "inputResponses": {} }),
        _ => json!({ "taskId": id }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_cannot_tell_a_task_from_one_that_never_existed() {
    let app = TestApp::start(0).await;
    let (db, replica) = (&app.db, app.replica());
    let http = http::client();
    let alice = replica.client("alice");

    // No worker: the task stays working, so a cancel that got through would be visible at
    // once as status "cancelled".
    let created = alice
        .call_tool("slow_compute", json!({ "seconds": 30 }))
        .await
        .expect("create");
    assert_eq!(created["resultType"], "task", "{created}");
    let id = task_id(&created);
    let before = task_row(db, &id).await;
    assert_eq!(before.0, "working");

    for (tenant, principal) in [("default", "bob"), ("other", "carol"), ("other", "alice")] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let never_issued = fresh_id();
            let theirs = Request::rpc(json!(77), method, task_params(method, &id))
                .owner(tenant, principal)
                .send(&http, &replica.url)
                .await;
            let unknown = Request::rpc(json!(77), method, task_params(method, &never_issued))
                .owner(tenant, principal)
                .send(&http, &replica.url)
                .await;
            let what = format!("{principal}@{tenant} {method}");
            assert_error(&theirs, &what, 200, -32602, Some(&json!(77)));
            assert_eq!(
                theirs.observable(),
                unknown.observable(),
                "{what}: the answer about alice's task must be byte-identical to the one about a never-issued id\n{}\n{}",
                theirs.text(),
                unknown.text()
            );
        }
    }
    assert_eq!(
        task_row(db, &id).await,
        before,
        "alice's task was changed by another owner"
    );

    // Malformed ids are told apart from unknown ones (it reveals nothing about anyone's tasks).
    let malformed = Request::rpc(json!(1), "tasks/get", json!({ "taskId": "not-a-task" }))
        .principal("alice")
        .send(&http, &replica.url)
        .await;
    let malformed = assert_error(&malformed, "malformed id", 200, -32602, Some(&json!(1)));
    let unknown = Request::rpc(json!(1), "tasks/get", json!({ "taskId": fresh_id() }))
        .principal("alice")
        .send(&http, &replica.url)
        .await;
    let unknown = assert_error(&unknown, "unknown id", 200, -32602, Some(&json!(1)));
    assert_ne!(malformed["message"], unknown["message"]);

    // Without the extension, every tasks/* method is refused before any lookup.
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        for target in [id.clone(), fresh_id(), "not-a-task".to_owned()] {
            let raw = Request::rpc_as(json!("nd"), method, task_params(method, &target), json!({}))
                .principal("alice")
                .send(&http, &replica.url)
                .await;
            let what = format!("non-declaring {method} {target}");
            let e = assert_error(&raw, &what, 400, -32021, Some(&json!("nd")));
            assert_eq!(
                e["data"]["requiredCapabilities"]["extensions"][TASKS],
                json!({}),
                "{what}: {e}"
            );
        }
    }
    assert_eq!(
        task_row(db, &id).await,
        before,
        "a refused request changed the task"
    );

    // The owner sees it, and can cancel it: the checks above were not vacuous.
    let own = Request::rpc(json!(77), "tasks/get", task_params("tasks/get", &id))
        .principal("alice")
        .send(&http, &replica.url)
        .await;
    let own = assert_result(&own, "owner tasks/get", &json!(77));
    assert_eq!(own["taskId"], json!(id));
    assert_eq!(status(&own), "working");
    let ack = alice.cancel_task(&id).await.expect("owner cancel");
    assert_eq!(ack["resultType"], "complete");
    assert_eq!(task_row(db, &id).await.0, "cancelled");

    app.stop().await;
}
