//! Input keys: all-or-nothing updates, each key answered once, single-use over the
//! task's life, and no row lock left behind by a call that changes nothing.

use mcp_tasks_store::{CancelOutcome, InputOutcome, Lookup, PoolConfig, Store, UpdateOutcome};
use mcp_tasks_tools::InputRequests;
use mcp_tasks_wire::TaskStatus;
use serde_json::{Value, json};

use super::{alice, answers, confirm_schema, name_schema, sorted, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, found, new_task, row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_keys() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();
    let task = create(store, &owner, new_task("multi_input", json!({}))).await;
    let id = task.id;
    let c = claim_id(store, "W", 60_000, id).await;

    let requests = InputRequests::new()
        .elicit("a", "Your name?", name_schema())
        .elicit("b", "Go ahead?", confirm_schema())
        .into_map();
    assert_eq!(
        store
            .worker()
            .request_input(
                &c.lease,
                &requests,
                Some("Waiting for input"),
                Some(&json!({"step": 1}))
            )
            .await
            .expect("request_input"),
        InputOutcome::Applied
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::InputRequired);
    assert_eq!(sorted(rec.issued_keys.clone()), sorted(["a", "b"]));
    assert_eq!(rec.input_requests.as_ref(), Some(&requests));
    assert_eq!(rec.lease_owner, None, "the lease is released while waiting");
    assert_eq!(rec.lease_expires_at, None);
    assert_eq!(rec.attempt, 0);
    assert_eq!(rec.checkpoint, Some(json!({"step": 1})));
    assert_eq!(rec.status_message.as_deref(), Some("Waiting for input"));
    assert_eq!(row(pool, id).await["run_after"], Value::Null);
    assert!(
        store
            .worker()
            .claim("W", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a task waiting for input was claimable"
    );
    // The old lease is gone.
    assert!(
        !store
            .worker()
            .set_status_message(&c.lease, "x")
            .await
            .expect("status")
    );

    let valid_a = json!({"action": "accept", "content": {"name": "Ada"}});
    let other_a = json!({"action": "accept", "content": {"name": "Grace"}});
    let valid_b = json!({"action": "accept", "content": {"confirm": true}});
    let invalid_b = json!({"action": "accept", "content": {"confirm": "yes"}});

    // All or nothing: one invalid answer rejects the whole update.
    let before = row(pool, id).await;
    match store
        .replica()
        .update_inputs(
            &owner,
            id,
            &answers(&[("a", valid_a.clone()), ("b", invalid_b.clone())]),
            validator,
        )
        .await
        .expect("update")
    {
        Lookup::Found(Err(e)) => assert_eq!(e.key, "b", "{e:?}"),
        other => panic!("expected a validation error, got {other:?}"),
    }
    assert_eq!(
        row(pool, id).await,
        before,
        "a rejected update changed the task"
    );

    // One of two keys answered: still waiting for the other.
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &answers(&[("a", valid_a.clone())]), validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Applied {
            keys: vec!["a".into()],
            resumed: false
        }))
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::InputRequired);
    assert_eq!(
        rec.input_requests
            .as_ref()
            .map(|m| m.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["b".to_owned()])
    );
    assert_eq!(rec.input_responses, answers(&[("a", valid_a.clone())]));
    assert_eq!(sorted(rec.issued_keys.clone()), sorted(["a", "b"]));
    assert_eq!(rec.lease_owner, None);
    assert!(rec.version > task.version);
    assert!(
        store
            .worker()
            .claim("W", 10, 60_000)
            .await
            .expect("claim")
            .is_empty()
    );

    // Answering an answered key again, or an unknown key, is ignored (and not validated).
    let before = row(pool, id).await;
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &answers(&[("a", other_a.clone())]), validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Ignored))
    );
    assert_eq!(row(pool, id).await, before);
    assert_eq!(
        found(store, &owner, id).await.input_responses["a"],
        valid_a,
        "the first answer stands"
    );
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &answers(&[("zzz", json!(42))]), validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Ignored))
    );
    assert_eq!(row(pool, id).await, before);

    // An invalid answer for the outstanding key is an error and changes nothing.
    match store
        .replica()
        .update_inputs(&owner, id, &answers(&[("b", invalid_b.clone())]), validator)
        .await
        .expect("update")
    {
        Lookup::Found(Err(e)) => {
            assert_eq!(e.key, "b");
            assert!(e.reason.contains("confirm"), "reason: {}", e.reason);
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
    assert_eq!(row(pool, id).await, before);

    // The last answer resumes the task.
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &answers(&[("b", valid_b.clone())]), validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Applied {
            keys: vec!["b".into()],
            resumed: true
        }))
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Working);
    assert_eq!(rec.input_requests, None);
    assert_eq!(
        rec.input_responses,
        answers(&[("a", valid_a.clone()), ("b", valid_b.clone())])
    );
    assert_eq!(rec.attempt, 0);
    assert_eq!(rec.lease_owner, None);
    assert_ne!(
        row(pool, id).await["run_after"],
        Value::Null,
        "resumed task is runnable"
    );
    // Claimable again, as a fresh first attempt that sees every answer and the checkpoint.
    let c2 = claim_id(store, "W2", 60_000, id).await;
    assert!(!c2.reclaimed);
    assert_eq!(c2.task.attempt, 1);
    assert_eq!(c2.lease.token, c.lease.token + 1);
    assert_eq!(c2.task.input_responses.len(), 2);
    assert_eq!(c2.task.checkpoint, Some(json!({"step": 1})));
    // Once resumed, further answers are ignored. (Checked after the claim on purpose: a
    // no-op update leaves its row lock behind for a moment, see
    // `no_op_client_calls_release_their_row_lock`, and the claim would skip the task.)
    let before = row(pool, id).await;
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &answers(&[("b", valid_b.clone())]), validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Ignored))
    );
    assert_eq!(row(pool, id).await, before);

    // Keys are single-use over the task's life.
    let reuse = InputRequests::new()
        .elicit("a", "Name again?", name_schema())
        .elicit("c", "Something new?", confirm_schema())
        .into_map();
    let before = row(pool, id).await;
    assert_eq!(
        store
            .worker()
            .request_input(&c2.lease, &reuse, Some("again"), Some(&json!({"step": 2})))
            .await
            .expect("request_input"),
        InputOutcome::KeyReused(vec!["a".into()])
    );
    assert_eq!(
        row(pool, id).await,
        before,
        "a refused input request changed the task"
    );

    // With cancellation requested, a new input request is refused so the run can end.
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    let before = row(pool, id).await;
    let fresh = InputRequests::new()
        .elicit("d", "Fresh key?", confirm_schema())
        .into_map();
    assert_eq!(
        store
            .worker()
            .request_input(&c2.lease, &fresh, Some("again"), None)
            .await
            .expect("request_input"),
        InputOutcome::CancelRequested
    );
    assert_eq!(row(pool, id).await, before);
    assert!(store.worker().holds(&c2.lease).await.expect("holds"));
}

/// A client call that changes nothing must not leave the task locked after it returns.
/// `update_inputs` and `cancel_task` lock the row (`SELECT … FOR UPDATE`) and, on their
/// early returns (ignored update, invalid answer, already terminal), drop the transaction
/// instead of ending it. sqlx then only *queues* the ROLLBACK, which is sent when a
/// background task returns the connection to the pool; until then the row stays locked
/// and `claim` (like expiry, rescue and purge: all `FOR UPDATE SKIP LOCKED`) passes the
/// task over. Here the caller's runtime is kept idle after the call returns, so that
/// background task cannot run: what is otherwise a timing-dependent miss (seen under load
/// in `input_keys`) becomes certain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_client_calls_release_their_row_lock() {
    let db = TestDb::new().await;
    let owner = alice();
    let task = create(
        &db.store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let id = task.id;

    let (url, caller) = (db.url.clone(), owner.clone());
    let (runtime, client_store, outcome) = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        let store = runtime
            .block_on(Store::connect(&url, &PoolConfig::default()))
            .expect("connect");
        // The task is working, so nothing is outstanding: the update is a no-op.
        let outcome = runtime
            .block_on(store.replica().update_inputs(
                &caller,
                id,
                &answers(&[("k", json!({"action": "decline"}))]),
                validator,
            ))
            .expect("update");
        (runtime, store, outcome)
    })
    .await
    .expect("client thread");
    assert_eq!(outcome, Lookup::Found(Ok(UpdateOutcome::Ignored)));

    // The call has returned; the task must be claimable.
    let claimed = db
        .store
        .worker()
        .claim("W", 1, 60_000)
        .await
        .expect("claim");
    let locks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
         WHERE l.locktype = 'transactionid' AND a.state = 'idle in transaction'
           AND a.datname = current_database()",
    )
    .fetch_one(&db.pool)
    .await
    .expect("locks");
    tokio::task::spawn_blocking(move || {
        drop(client_store);
        runtime.shutdown_background();
    })
    .await
    .expect("client cleanup");
    assert_eq!(
        claimed.len(),
        1,
        "update_inputs returned Ignored but its transaction is still open ({locks} idle-in-transaction \
         lock holders), so the task could not be claimed"
    );
}
