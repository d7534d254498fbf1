//! Fenced leases: a worker whose lease was claimed by another can never write again (one
//! whose lease merely lapsed, with nobody claiming since, still holds the only token and
//! goes on), heartbeats extend only the exact lease and report cancellation, and
//! cancelling takes effect at once wherever no worker holds the task.

use mcp_tasks_store::{CancelOutcome, Finish, HeartbeatReply, InputOutcome, Lease, Lookup, Owner};
use mcp_tasks_tools::InputRequests;
use mcp_tasks_wire::{ErrorObject, TaskStatus};
use serde_json::{Value, json};

use super::{alice, confirm_schema, text_result};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, force_lapse, found, new_task, row};

// ---------------------------------------------------------------------------------------
// Fencing: a lost worker can never write again
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_race_finalizes_once() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let id = task.id;
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.attempt, 0);

    // A claims.
    let a = claim_id(store, "A", 60_000, id).await;
    assert!(!a.reclaimed, "first claim is not a reclaim");
    assert_eq!(a.lease.token, task.lease_token + 1);
    assert_eq!(a.lease.owner, owner);
    assert_eq!(a.task.attempt, 1);
    assert_eq!(a.task.lease_owner.as_deref(), Some("A"));
    // While A holds the lease its writes land (so the refusals below mean something).
    assert!(store.worker().holds(&a.lease).await.expect("holds"));
    assert!(
        store
            .worker()
            .set_status_message(&a.lease, "A at work")
            .await
            .expect("status")
    );
    // An unchanged message writes nothing but is not mistaken for a lost lease.
    assert!(
        store
            .worker()
            .set_status_message(&a.lease, "A at work")
            .await
            .expect("status")
    );
    assert!(
        store
            .worker()
            .save_checkpoint(&a.lease, &json!({"by": "A"}))
            .await
            .expect("checkpoint")
    );

    // A's lease lapses. Nobody has claimed since, so A's token is still the only one: its
    // writes land (after a database outage longer than the lease, the run goes on).
    force_lapse(pool, id).await;
    assert!(store.worker().holds(&a.lease).await.expect("holds"));
    assert!(
        store
            .worker()
            .set_status_message(&a.lease, "A after lapse")
            .await
            .expect("status")
    );
    force_lapse(pool, id).await;
    // B reclaims with the next token.
    let b = claim_id(store, "B", 60_000, id).await;
    assert!(b.reclaimed, "B took over a lapsed lease");
    assert_eq!(b.lease.token, a.lease.token + 1);
    assert_eq!(b.task.attempt, 2);
    assert_eq!(b.task.lease_owner.as_deref(), Some("B"));
    assert_eq!(
        b.task.checkpoint,
        Some(json!({"by": "A"})),
        "B resumes from A's checkpoint"
    );
    let msg = b.task.status_message.clone().unwrap_or_default();
    assert!(
        msg.contains("attempt 2"),
        "status message on reclaim: {msg:?}"
    );

    // Every write of A is refused and changes nothing.
    let held_by_b = row(pool, id).await;
    assert!(
        !store
            .worker()
            .set_status_message(&a.lease, "A zombie")
            .await
            .expect("status")
    );
    assert_eq!(
        row(pool, id).await,
        held_by_b,
        "stale set_status_message wrote"
    );
    assert!(
        !store
            .worker()
            .save_checkpoint(&a.lease, &json!({"by": "A zombie"}))
            .await
            .expect("checkpoint")
    );
    assert_eq!(
        row(pool, id).await,
        held_by_b,
        "stale save_checkpoint wrote"
    );
    let requests = InputRequests::new()
        .elicit("a_wants", "Sure?", confirm_schema())
        .into_map();
    assert_eq!(
        store
            .worker()
            .request_input(
                &a.lease,
                &requests,
                Some("A waits"),
                Some(&json!({"by": "A"}))
            )
            .await
            .expect("request_input"),
        InputOutcome::Stale
    );
    assert_eq!(row(pool, id).await, held_by_b, "stale request_input wrote");
    for finish in [
        Finish::Completed(text_result("by A")),
        Finish::Failed(ErrorObject::new(-32603, "A failed")),
        Finish::Cancelled,
    ] {
        assert!(
            !store
                .worker()
                .finish(&a.lease, &finish, Some("A done"))
                .await
                .expect("finish"),
            "stale finish {finish:?} accepted"
        );
        assert_eq!(
            row(pool, id).await,
            held_by_b,
            "stale finish {finish:?} wrote"
        );
    }
    assert!(!store.worker().release(&a.lease).await.expect("release"));
    assert_eq!(row(pool, id).await, held_by_b, "stale release wrote");
    assert!(
        store
            .worker()
            .heartbeat(std::slice::from_ref(&a.lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty(),
        "a stale lease was extended"
    );
    assert_eq!(row(pool, id).await, held_by_b, "stale heartbeat wrote");
    assert!(store.worker().holds(&b.lease).await.expect("holds"));

    // B finishes; A still cannot.
    let result_b = text_result("by B");
    assert!(
        store
            .worker()
            .finish(&b.lease, &Finish::Completed(result_b.clone()), None)
            .await
            .expect("finish")
    );
    let done = row(pool, id).await;
    assert!(
        !store
            .worker()
            .finish(&a.lease, &Finish::Completed(text_result("by A")), None)
            .await
            .expect("finish")
    );
    assert_eq!(row(pool, id).await, done, "A's late finish wrote");

    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Completed);
    assert_eq!(rec.result, Some(result_b));
    assert_eq!(rec.error, None);
    assert_eq!(rec.lease_owner, None);
    assert_eq!(rec.lease_expires_at, None);
    assert!(rec.finished_at.is_some());
    assert_eq!(rec.attempt, 2);
    assert_eq!(
        done["run_after"],
        Value::Null,
        "a finished task is not runnable"
    );

    // Terminal is final, for B too.
    assert!(
        !store
            .worker()
            .finish(
                &b.lease,
                &Finish::Completed(text_result("by B again")),
                None
            )
            .await
            .expect("finish")
    );
    assert!(
        !store
            .worker()
            .finish(
                &b.lease,
                &Finish::Failed(ErrorObject::new(-32603, "late")),
                None
            )
            .await
            .expect("finish")
    );
    assert!(!store.worker().release(&b.lease).await.expect("release"));
    assert!(
        !store
            .worker()
            .set_status_message(&b.lease, "B after finish")
            .await
            .expect("status")
    );
    assert!(
        store
            .worker()
            .heartbeat(std::slice::from_ref(&b.lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty()
    );
    assert_eq!(row(pool, id).await, done, "a finished task changed");
    assert!(
        store
            .worker()
            .claim("C", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a finished task was claimable"
    );
}

// ---------------------------------------------------------------------------------------
// Heartbeats and cancellation
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_extends_and_reports_loss_and_cancel() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();

    // A held lease is extended.
    let t1 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let c1 = claim_id(store, "W", 10_000, t1.id).await;
    let before = found(store, &owner, t1.id).await;
    let old_expiry = before.lease_expires_at.expect("leased");
    let replies = store
        .worker()
        .heartbeat(std::slice::from_ref(&c1.lease), 60_000)
        .await
        .expect("heartbeat");
    assert_eq!(
        replies,
        vec![HeartbeatReply {
            id: t1.id,
            cancel_requested: false,
            extended: true,
        }]
    );
    let after = found(store, &owner, t1.id).await;
    let new_expiry = after.lease_expires_at.expect("still leased");
    assert!(
        new_expiry - old_expiry > time::Duration::seconds(40),
        "lease not extended: {old_expiry} -> {new_expiry}"
    );
    assert_eq!(after.lease_owner.as_deref(), Some("W"));
    assert_eq!(after.lease_token, c1.lease.token);
    assert_eq!(after.status, TaskStatus::Working);
    let r = row(pool, t1.id).await;
    assert_eq!(
        r["run_after"],
        Value::Null,
        "a held task is out of the queue; its lapse is read from lease_expires_at"
    );

    // Only the exact lease is extended: a wrong token or owner is not.
    let wrong_token = Lease {
        token: c1.lease.token + 1,
        ..c1.lease.clone()
    };
    let wrong_owner = Lease {
        owner: Owner::new("acme", "mallory"),
        ..c1.lease.clone()
    };
    let replies = store
        .worker()
        .heartbeat(&[wrong_token, c1.lease.clone(), wrong_owner], 60_000)
        .await
        .expect("heartbeat");
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].id, t1.id);

    // A lapsed lease nobody claimed since is taken back by its heartbeat.
    force_lapse(pool, t1.id).await;
    assert_eq!(
        store
            .worker()
            .heartbeat(std::slice::from_ref(&c1.lease), 60_000)
            .await
            .expect("heartbeat")
            .len(),
        1,
        "a lapsed lease with its token unchanged was not taken back"
    );
    assert!(
        found(store, &owner, t1.id)
            .await
            .lease_expires_at
            .expect("leased")
            > time::OffsetDateTime::now_utc() + time::Duration::seconds(30)
    );
    force_lapse(pool, t1.id).await;
    // A lapsed lease counts as not held: cancellation takes effect at once.
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t1.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Cancelled)
    );
    let rec = found(store, &owner, t1.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled);
    assert_eq!(rec.lease_owner, None);

    // Cancelling a held task asks its worker; the next heartbeat says so.
    let t2 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let c2 = claim_id(store, "W", 60_000, t2.id).await;
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t2.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    let rec = found(store, &owner, t2.id).await;
    assert_eq!(rec.status, TaskStatus::Working, "a held task keeps running");
    assert_eq!(rec.lease_owner.as_deref(), Some("W"));
    let requested_at = rec.cancel_requested_at.expect("cancel_requested_at");
    assert_eq!(
        store
            .worker()
            .heartbeat(std::slice::from_ref(&c2.lease), 60_000)
            .await
            .expect("heartbeat"),
        vec![HeartbeatReply {
            id: t2.id,
            cancel_requested: true,
            extended: true,
        }]
    );
    // Asking again changes nothing about when it was first asked.
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t2.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    assert_eq!(
        found(store, &owner, t2.id).await.cancel_requested_at,
        Some(requested_at)
    );
    // The worker then records the cancellation.
    assert!(
        store
            .worker()
            .finish(
                &c2.lease,
                &Finish::Cancelled,
                Some("Cancelled at the client's request")
            )
            .await
            .expect("finish")
    );
    assert_eq!(
        found(store, &owner, t2.id).await.status,
        TaskStatus::Cancelled
    );

    // An unleased working task is cancelled at once.
    let t3 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t3.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Cancelled)
    );
    let rec = found(store, &owner, t3.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled);
    assert!(rec.finished_at.is_some());
    assert!(rec.cancel_requested_at.is_some());
    assert_eq!(
        rec.status_message.as_deref(),
        Some("Cancelled at the client's request")
    );
    assert_eq!(row(pool, t3.id).await["run_after"], Value::Null);
    assert!(
        store
            .worker()
            .claim("W", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a cancelled task was claimable"
    );

    // An input_required task is cancelled at once.
    let t4 = create(
        store,
        &owner,
        new_task("confirm_delete", json!({"filename": "f"})),
    )
    .await;
    let c4 = claim_id(store, "W", 60_000, t4.id).await;
    let requests = InputRequests::new()
        .elicit("confirm_delete", "Delete f?", confirm_schema())
        .into_map();
    assert_eq!(
        store
            .worker()
            .request_input(&c4.lease, &requests, Some("Waiting for input"), None)
            .await
            .expect("request_input"),
        InputOutcome::Applied
    );
    assert_eq!(
        found(store, &owner, t4.id).await.status,
        TaskStatus::InputRequired
    );
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t4.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Cancelled)
    );
    let rec = found(store, &owner, t4.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled);
    assert_eq!(rec.input_requests, None);
    assert!(rec.finished_at.is_some());

    // A terminal task is left exactly as it is.
    for id in [t3.id, t4.id] {
        let before = row(pool, id).await;
        assert_eq!(
            store
                .replica()
                .cancel_task(&owner, id)
                .await
                .expect("cancel"),
            Lookup::Found(CancelOutcome::AlreadyTerminal)
        );
        assert_eq!(
            row(pool, id).await,
            before,
            "cancel changed a terminal task"
        );
    }
    let t5 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let c5 = claim_id(store, "W", 60_000, t5.id).await;
    assert!(
        store
            .worker()
            .finish(&c5.lease, &Finish::Completed(text_result("done")), None)
            .await
            .expect("finish")
    );
    let before = row(pool, t5.id).await;
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t5.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::AlreadyTerminal)
    );
    assert_eq!(
        row(pool, t5.id).await,
        before,
        "cancel changed a completed task"
    );
    assert_eq!(before["status"], json!("completed"));
    assert_eq!(before["cancel_requested_at"], Value::Null);
}
