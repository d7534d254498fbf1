//! Owners never see each other's tasks: neither through a forged lease nor through any
//! client call.

use mcp_tasks_store::{CancelOutcome, Finish, InputOutcome, Lease, Lookup, Owner, UpdateOutcome};
use mcp_tasks_tools::InputRequests;
use serde_json::json;

use super::{alice, answers, confirm_schema, text_result, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, new_task, row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_owner_isolation() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();
    let strangers = [
        Owner::new("acme", "bob"),
        Owner::new("other", "alice"),
        Owner::new("ACME", "alice"),
        Owner::new("acme", "Alice"),
        Owner::new("", ""),
    ];
    let task = create(
        store,
        &owner,
        new_task("confirm_delete", json!({"filename": "f"})),
    )
    .await;
    let id = task.id;
    assert_eq!(task.owner, owner);

    // The worker learns the creating owner from its claim.
    let c = claim_id(store, "W", 60_000, id).await;
    assert_eq!(c.lease.owner, owner);
    assert_eq!(c.task.owner, owner);

    // A lease naming another owner (right id and token) writes nothing.
    let before = row(pool, id).await;
    for other in &strangers {
        let forged = Lease {
            owner: other.clone(),
            ..c.lease.clone()
        };
        assert!(!store.worker().holds(&forged).await.expect("holds"));
        assert!(
            !store
                .worker()
                .set_status_message(&forged, "forged")
                .await
                .expect("status")
        );
        assert!(
            !store
                .worker()
                .save_checkpoint(&forged, &json!(1))
                .await
                .expect("checkpoint")
        );
        assert!(
            store
                .worker()
                .heartbeat(std::slice::from_ref(&forged), 60_000)
                .await
                .expect("heartbeat")
                .is_empty()
        );
        assert!(
            !store
                .worker()
                .finish(&forged, &Finish::Completed(text_result("forged")), None)
                .await
                .expect("finish")
        );
        assert!(!store.worker().release(&forged).await.expect("release"));
        assert_eq!(
            store
                .worker()
                .request_input(
                    &forged,
                    &InputRequests::new()
                        .elicit("forged", "?", confirm_schema())
                        .into_map(),
                    None,
                    None
                )
                .await
                .expect("request_input"),
            InputOutcome::Stale
        );
        assert_eq!(
            row(pool, id).await,
            before,
            "a forged lease of {other:?} wrote"
        );
    }

    // Park it waiting for input, so an update by the right owner would apply.
    let requests = InputRequests::new()
        .elicit("confirm_delete", "Delete f?", confirm_schema())
        .into_map();
    assert_eq!(
        store
            .worker()
            .request_input(&c.lease, &requests, Some("Waiting for input"), None)
            .await
            .expect("request_input"),
        InputOutcome::Applied
    );
    let yes = answers(&[(
        "confirm_delete",
        json!({"action": "accept", "content": {"confirm": true}}),
    )]);
    let before = row(pool, id).await;
    for other in &strangers {
        assert_eq!(
            store.replica().get_task(other, id).await.expect("get"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(
            store
                .replica()
                .update_inputs(other, id, &yes, validator)
                .await
                .expect("update"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(
            store
                .replica()
                .cancel_task(other, id)
                .await
                .expect("cancel"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(row(pool, id).await, before, "{other:?} changed the task");
    }

    // The same calls by the owner do work.
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &yes, validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Applied {
            keys: vec!["confirm_delete".into()],
            resumed: true
        }))
    );
    let c2 = claim_id(store, "W", 60_000, id).await;
    assert_eq!(c2.lease.owner, owner);
    let before = row(pool, id).await;
    for other in &strangers {
        assert_eq!(
            store
                .replica()
                .cancel_task(other, id)
                .await
                .expect("cancel"),
            Lookup::NotFound
        );
    }
    assert_eq!(row(pool, id).await, before);
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
}
