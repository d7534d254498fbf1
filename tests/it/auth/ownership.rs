//! Ownership with real tokens: another principal or tenant cannot see or touch a task.

use mcp_tasks_client::Subscription;
use mcp_tasks_store::TaskId;
use serde_json::{Value, json};

use super::{WAIT, bearer, post};
use crate::harness::jwt::{Jwt, SECRET, claims, hs256};
use crate::harness::{TestApp, status, task_id};

/// The params of a task method, for a task id.
type ParamsFor = fn(&str) -> Value;

async fn next_frame(sub: &mut Subscription) -> Option<Value> {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no frame within the wait")
        .expect("stream error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_or_tenant_cannot_see_or_touch_a_task() {
    let app = TestApp::builder()
        .jwt(Jwt::hs256())
        .random_state_keys()
        .start()
        .await;
    let (db, replica) = (&app.db, app.replica());
    let token =
        |sub: &str, tenant: &str| hs256(SECRET.as_bytes(), &claims(&replica.url, sub, tenant));
    let alice = replica.bearer_client(token("alice", "t1"));
    let created = alice
        .call_tool("slow_compute", json!({ "seconds": 30 }))
        .await
        .expect("tools/call");
    assert_eq!(created["resultType"], "task", "{created}");
    let id = task_id(&created);
    let unknown = TaskId::random().to_string();
    assert_eq!(status(&alice.get_task(&id).await.expect("get")), "working");

    let requests: [(&str, ParamsFor); 3] = [
        ("tasks/get", |id| json!({ "taskId": id })),
        (
            "tasks/update",
            |id| json!({ "taskId": id, "inputResponses": {} }),
        ),
        ("tasks/cancel", |id| json!({ "taskId": id })),
    ];
    for (who, sub, tenant) in [("bob@t1", "bob", "t1"), ("alice@t2", "alice", "t2")] {
        let auth = [bearer(&token(sub, tenant))];
        for (method, params) in &requests {
            let theirs = post(&replica.url, &auth, json!("probe"), method, params(&id)).await;
            let nobodys = post(
                &replica.url,
                &auth,
                json!("probe"),
                method,
                params(&unknown),
            )
            .await;
            let e = nobodys.json();
            assert_eq!(e["error"]["code"], -32602, "{who} {method}: {e}");
            assert!(
                e["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("not found"),
                "{who} {method}: {e}"
            );
            assert_eq!(
                (theirs.status, theirs.text()),
                (nobodys.status, nobodys.text()),
                "{who} {method}: another owner's task must answer exactly like an unknown id"
            );
        }

        let client = replica.bearer_client(token(sub, tenant));
        let mut listen = client
            .listen(json!("listen"), json!({ "taskIds": [id] }))
            .await
            .expect("listen");
        let ack = next_frame(&mut listen).await.expect("acknowledgement");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{who}: {ack}"
        );
        assert_eq!(
            ack["params"]["notifications"],
            json!({ "taskIds": [] }),
            "{who}: another owner's task must not be accepted: {ack}"
        );
        let end = next_frame(&mut listen).await.expect("listen result");
        assert_eq!(end["id"], "listen", "{who}: nothing to follow: {end}");
        assert!(next_frame(&mut listen).await.is_none(), "{who}");
    }

    // The owner still sees it, untouched.
    let mut own = alice
        .listen(json!("own"), json!({ "taskIds": [id] }))
        .await
        .expect("listen");
    let ack = next_frame(&mut own).await.expect("acknowledgement");
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "taskIds": [id] }),
        "{ack}"
    );
    drop(own);
    let task = alice.get_task(&id).await.expect("get");
    assert_eq!(status(&task), "working", "{task}");
    let mut conn = db.sql().await;
    let (status_in_db, cancel_requested, responses): (String, bool, Value) = sqlx::query_as(
        "SELECT status, cancel_requested_at IS NOT NULL, input_responses FROM tasks WHERE id = $1",
    )
    .bind(uuid::Uuid::parse_str(&id).expect("uuid"))
    .fetch_one(&mut conn)
    .await
    .expect("row");
    assert_eq!(status_in_db, "working");
    assert!(!cancel_requested, "another owner's cancel reached the task");
    assert_eq!(responses, json!({}));
    assert_eq!(db.count_tasks("true").await, 1);

    alice.cancel_task(&id).await.expect("the owner cancels");
    app.stop().await;
}
