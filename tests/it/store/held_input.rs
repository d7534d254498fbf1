//! Input asked for while the run keeps its lease (`WorkerStore::ask_held`): the task shows
//! `input_required` and stays leased, heartbeats go on, nobody else can claim it, the
//! answer makes it `working` but not runnable, and the run reads the answer. A lapsed
//! lease of such a task is reclaimed with the request gone; a cancellation finishes it.

use mcp_tasks_store::{CancelOutcome, Finish, HeldAnswers, HeldAsk, Lookup, UpdateOutcome};
use mcp_tasks_tools::InputRequests;
use mcp_tasks_wire::TaskStatus;
use serde_json::{Value, json};

use super::{alice, answers, name_schema, text_result, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, found, new_task, row};

fn name_request() -> Value {
    InputRequests::new()
        .elicit("name", "Your name?", name_schema())
        .into_map()
        .remove("name")
        .expect("the request")
}

#[tokio::test]
async fn a_held_request_keeps_the_lease_until_answered() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();
    let id = create(store, &owner, new_task("upstream_tool", json!({})))
        .await
        .id;
    let c = claim_id(store, "W1", 60_000, id).await;

    let asked = store
        .worker()
        .ask_held(
            &c.lease,
            &[("name".into(), name_request())],
            Some("Waiting for input"),
        )
        .await
        .expect("ask_held");
    assert_eq!(asked, HeldAsk::Asked(vec!["name".into()]));
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::InputRequired);
    assert_eq!(rec.lease_owner.as_deref(), Some("W1"), "the lease is kept");
    assert_eq!(rec.lease_token, c.lease.token);
    assert_eq!(row(pool, id).await["run_after"], Value::Null);
    // Nobody else can take it, and its heartbeat still holds it.
    assert!(
        store
            .worker()
            .claim("W2", 10, 60_000)
            .await
            .expect("claim")
            .is_empty()
    );
    let beats = store
        .worker()
        .heartbeat(std::slice::from_ref(&c.lease), 60_000)
        .await
        .expect("heartbeat");
    assert_eq!(beats.len(), 1, "the heartbeat kept the lease");
    assert_eq!(
        store
            .worker()
            .held_answers(&c.lease, &["name".into()])
            .await
            .expect("read"),
        Some(HeldAnswers::Waiting)
    );

    // The answer (any replica) makes it working again, still leased, not runnable.
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    let applied = store
        .replica()
        .update_inputs(&owner, id, &answers(&[("name", answer.clone())]), validator)
        .await
        .expect("update_inputs");
    assert_eq!(
        applied,
        Lookup::Found(Ok(UpdateOutcome::Applied {
            keys: vec!["name".into()],
            resumed: true
        }))
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Working);
    assert_eq!(rec.lease_owner.as_deref(), Some("W1"));
    assert_eq!(rec.input_requests, None);
    assert_eq!(row(pool, id).await["run_after"], Value::Null);
    assert!(
        store
            .worker()
            .claim("W2", 10, 60_000)
            .await
            .expect("claim")
            .is_empty()
    );
    assert_eq!(
        store
            .worker()
            .held_answers(&c.lease, &["name".into()])
            .await
            .expect("read"),
        Some(HeldAnswers::Answered(vec![answer]))
    );

    // Asking again under a used key gets a fresh one; the run finishes as usual.
    let asked = store
        .worker()
        .ask_held(&c.lease, &[("name".into(), name_request())], None)
        .await
        .expect("ask_held");
    assert_eq!(asked, HeldAsk::Asked(vec!["name-2".into()]));
    let done = store
        .worker()
        .finish(&c.lease, &Finish::Completed(text_result("hello Ada")), None)
        .await
        .expect("finish");
    assert!(done, "a run waiting for input can still finish");
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Completed);
    assert_eq!(rec.input_requests, None);
    assert_eq!(rec.lease_owner, None);
}

#[tokio::test]
async fn a_lapsed_held_request_dies_with_its_run() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let id = create(store, &owner, new_task("upstream_tool", json!({})))
        .await
        .id;
    let c = claim_id(store, "W1", 200, id).await;
    let asked = store
        .worker()
        .ask_held(&c.lease, &[("name".into(), name_request())], None)
        .await
        .expect("ask_held");
    assert_eq!(asked, HeldAsk::Asked(vec!["name".into()]));

    // The worker is gone: its lease lapses and another worker reclaims the task.
    let reclaimed = crate::harness::eventually(
        std::time::Duration::from_secs(10),
        "the lapsed lease reclaimed",
        || async {
            // As the maintenance leader does, between claims.
            store.worker().requeue_lapsed(100).await.ok()?;
            store.worker().claim("W2", 1, 60_000).await.ok()?.pop()
        },
    )
    .await;
    assert!(reclaimed.reclaimed, "{reclaimed:?}");
    assert_eq!(reclaimed.task.status, TaskStatus::Working);
    assert_eq!(reclaimed.task.input_requests, None);
    assert_eq!(
        store
            .worker()
            .held_answers(&c.lease, &["name".into()])
            .await
            .expect("read"),
        None,
        "the old run's lease is gone"
    );
    // Its key stays used: a late answer is ignored.
    let late = store
        .replica()
        .update_inputs(
            &owner,
            id,
            &answers(&[("name", json!({"action": "decline"}))]),
            validator,
        )
        .await
        .expect("update_inputs");
    assert_eq!(late, Lookup::Found(Ok(UpdateOutcome::Ignored)));
    let asked = store
        .worker()
        .ask_held(&reclaimed.lease, &[("name".into(), name_request())], None)
        .await
        .expect("ask_held");
    assert_eq!(asked, HeldAsk::Asked(vec!["name-2".into()]));
}

#[tokio::test]
async fn cancelling_a_held_request_reaches_its_run() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let id = create(store, &owner, new_task("upstream_tool", json!({})))
        .await
        .id;
    let c = claim_id(store, "W1", 60_000, id).await;
    store
        .worker()
        .ask_held(&c.lease, &[("name".into(), name_request())], None)
        .await
        .expect("ask_held");
    let cancel = store
        .replica()
        .cancel_task(&owner, id)
        .await
        .expect("cancel");
    assert_eq!(cancel, Lookup::Found(CancelOutcome::Requested));
    let beats = store
        .worker()
        .heartbeat(std::slice::from_ref(&c.lease), 60_000)
        .await
        .expect("heartbeat");
    assert!(beats[0].cancel_requested, "the heartbeat tells the run");
    assert!(
        store
            .worker()
            .finish(&c.lease, &Finish::Cancelled, None)
            .await
            .expect("finish")
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled);
    assert_eq!(rec.input_requests, None);
}
