//! `requestState` key rotation across replicas.

use mcp_tasks_server::StateKeys;
use serde_json::json;

use super::user_name;
use crate::harness::{Replica, TestDb, registry, server_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_state_keys_rotate_across_replicas() {
    let db = TestDb::new().await;
    let (k1, k2) = ("11".repeat(32), "22".repeat(32));
    let start = |keys: String| {
        let store = db.store.clone();
        async move {
            Replica::start_with(
                &store,
                registry("conformance"),
                server_config(),
                StateKeys::parse(&keys).expect("keys"),
            )
            .await
        }
    };
    let old = start(k1.clone()).await;
    let rotated = start(format!("{k2},{k1}")).await;
    let new_only = start(k2.clone()).await;

    let round_one = |replica: &Replica| {
        let client = replica.client("alice");
        async move {
            let r1 = client
                .call_tool("test_tool_with_task", json!({}))
                .await
                .expect("round 1");
            assert_eq!(r1["resultType"], "input_required", "{r1}");
            r1["requestState"]
                .as_str()
                .expect("requestState")
                .to_owned()
        }
    };
    let round_two = |replica: &Replica, state: String, id: &'static str| {
        let client = replica.client("alice");
        async move {
            client
                .send(
                    json!(id),
                    "tools/call",
                    json!({
                        "name": "test_tool_with_task",
                        "arguments": {},
                        "inputResponses": user_name("Alice"),
                        "requestState": state,
                    }),
                )
                .await
                .expect("round 2")
        }
    };
    let refused = |ex: &mcp_tasks_client::Exchange, what: &str| {
        assert_eq!(ex.status, 200, "{what}: {:?}", ex.body);
        let body = ex.body.clone().expect("body");
        assert_eq!(body["error"]["code"], -32602, "{what}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("requestState"),
            "{what}: {body}"
        );
    };

    // Round 1 signed with K1, round 2 on a replica that signs with K2 and still knows K1.
    let state = round_one(&old).await;
    let ex = round_two(&rotated, state.clone(), "r2").await;
    assert_eq!(ex.status, 200, "{:?}", ex.body);
    let created = ex.into_result().expect("round 2 on the rotated replica");
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(db.count_tasks("true").await, 1);

    // A replica that knows only K2 refuses a K1 state.
    let state = round_one(&old).await;
    let ex = round_two(&new_only, state, "r3").await;
    refused(&ex, "a K1 state on a K2-only replica");

    // The rotated replica signs with K2: its states verify where only K2 is known, and
    // not where only K1 is.
    let state = round_one(&rotated).await;
    let ex = round_two(&old, state.clone(), "r4").await;
    refused(&ex, "a K2 state on a K1-only replica");
    let ex = round_two(&new_only, state, "r5").await;
    assert_eq!(ex.status, 200, "{:?}", ex.body);
    assert_eq!(ex.into_result().expect("task")["resultType"], "task");
    assert_eq!(
        db.count_tasks("true").await,
        2,
        "only the accepted rounds created tasks"
    );

    for r in [old, rotated, new_only] {
        r.stop().await;
    }
}
