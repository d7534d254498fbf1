//! Fenced leases, attempts, input keys, expiry and retention, owner isolation and worker
//! hand-over, mostly at the store level against a real PostgreSQL.
//!
//! Time-dependent negative checks ("not yet expired") are only asserted when the test
//! itself measured that it is still inside the window, so a stalled machine skips the
//! check instead of failing it; waiting for a state always goes through `eventually`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use mcp_tasks_store::{
    CancelOutcome, Claimed, Finish, HeartbeatReply, InputOutcome, Lease, Lookup, MaintenanceReport,
    NewTask, Owner, PoolConfig, RescueReport, Store, TaskId, TaskRecord, UpdateOutcome,
};
use mcp_tasks_tools::{InputRequests, Outcome, Registry, Tool, validate_input_response};
use mcp_tasks_wire::{ErrorObject, TaskStatus};
use mcp_tasks_worker::WorkerConfig;
use serde_json::{Map, Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::harness::{TestDb, Worker, eventually, registry, worker_config};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn alice() -> Owner {
    Owner::new("acme", "alice")
}

fn new_task(tool: &str, arguments: Value) -> NewTask {
    NewTask {
        tool: tool.into(),
        arguments,
        status_message: Some("Queued".into()),
        ttl_ms: Some(3_600_000),
        poll_interval_ms: Some(500),
        retention_ms: 60_000,
        max_attempts: 3,
        input_responses: Map::new(),
        trace_context: None,
        idempotency: None,
    }
}

async fn create(store: &Store, owner: &Owner, task: NewTask) -> TaskRecord {
    store.create_task(owner, task).await.expect("create_task")
}

async fn found(store: &Store, owner: &Owner, id: TaskId) -> TaskRecord {
    match store.get_task(owner, id).await.expect("get_task") {
        Lookup::Found(task) => task,
        other => panic!("task {id} not found for its owner: {other:?}"),
    }
}

/// The whole row, every column (including those `TaskRecord` does not carry, such as
/// `run_after` and `expires_at`), or `null` when there is no row.
async fn row(pool: &PgPool, id: TaskId) -> Value {
    sqlx::query_scalar::<_, Value>("SELECT to_jsonb(t) FROM tasks t WHERE id = $1")
        .bind(id.0)
        .fetch_optional(pool)
        .await
        .expect("read row")
        .unwrap_or(Value::Null)
}

/// Makes the current lease of `id` lapse, as if its worker had stopped heartbeating.
async fn force_lapse(pool: &PgPool, id: TaskId) {
    let done = sqlx::query(
        "UPDATE tasks SET lease_expires_at = now() - interval '1 second',
                          run_after = now() - interval '1 second'
         WHERE id = $1 AND lease_owner IS NOT NULL",
    )
    .bind(id.0)
    .execute(pool)
    .await
    .expect("force lapse");
    assert_eq!(done.rows_affected(), 1, "task {id} had no lease to lapse");
}

/// Claims exactly one task and checks it is `id`.
async fn claim_id(store: &Store, worker: &str, lease_ms: i64, id: TaskId) -> Claimed {
    let mut claimed = store.claim(worker, 1, lease_ms).await.expect("claim");
    assert_eq!(claimed.len(), 1, "{worker} expected to claim task {id}");
    let c = claimed.pop().expect("one claim");
    assert_eq!(c.lease.id, id, "{worker} claimed another task");
    c
}

fn confirm_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "confirm": { "type": "boolean" } },
        "required": ["confirm"]
    })
}

fn name_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "name": { "type": "string" } },
        "required": ["name"]
    })
}

fn answers(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn validator(_key: &str, request: &Value, response: &Value) -> Result<(), String> {
    validate_input_response(request, response)
}

fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": false })
}

fn sorted(keys: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    let mut v: Vec<String> = keys.into_iter().map(Into::into).collect();
    v.sort();
    v
}

fn micros(d: time::Duration) -> i128 {
    d.whole_microseconds()
}

/// A worker on a runtime of its own, so that a crash can be simulated faithfully:
/// shutting the runtime down drops every task the worker spawned (claim loop, heartbeats,
/// LISTEN, maintenance, running handlers) and its database connections, with nothing
/// released or recorded.
struct IsolatedWorker {
    runtime: Option<tokio::runtime::Runtime>,
}

impl IsolatedWorker {
    fn start(url: &str, registry: Registry, config: WorkerConfig) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("worker runtime");
        let url = url.to_owned();
        runtime.spawn(async move {
            let store = Store::connect(
                &url,
                &PoolConfig {
                    max_connections: 4,
                    ..PoolConfig::default()
                },
            )
            .await
            .expect("connect");
            mcp_tasks_worker::run(store, registry, config, CancellationToken::new())
                .await
                .expect("worker failed");
        });
        Self {
            runtime: Some(runtime),
        }
    }

    /// Kills the worker at once, like a crashed process.
    fn crash(mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for IsolatedWorker {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. Fencing: a lost worker can never write again
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
    assert!(store.holds(&a.lease).await.expect("holds"));
    assert!(
        store
            .set_status_message(&a.lease, "A at work")
            .await
            .expect("status")
    );
    // An unchanged message writes nothing but is not mistaken for a lost lease.
    assert!(
        store
            .set_status_message(&a.lease, "A at work")
            .await
            .expect("status")
    );
    assert!(
        store
            .save_checkpoint(&a.lease, &json!({"by": "A"}))
            .await
            .expect("checkpoint")
    );

    // A's lease lapses. Even before anyone else claims, A can no longer write.
    force_lapse(pool, id).await;
    let lapsed = row(pool, id).await;
    assert!(!store.holds(&a.lease).await.expect("holds"));
    assert!(
        !store
            .set_status_message(&a.lease, "A after lapse")
            .await
            .expect("status")
    );
    assert!(
        !store
            .finish(&a.lease, &Finish::Completed(text_result("by A")), None)
            .await
            .expect("finish")
    );
    assert_eq!(row(pool, id).await, lapsed, "a lapsed lease wrote");

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
    assert!(!store.release(&a.lease).await.expect("release"));
    assert_eq!(row(pool, id).await, held_by_b, "stale release wrote");
    assert!(
        store
            .heartbeat(std::slice::from_ref(&a.lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty(),
        "a stale lease was extended"
    );
    assert_eq!(row(pool, id).await, held_by_b, "stale heartbeat wrote");
    assert!(store.holds(&b.lease).await.expect("holds"));

    // B finishes; A still cannot.
    let result_b = text_result("by B");
    assert!(
        store
            .finish(&b.lease, &Finish::Completed(result_b.clone()), None)
            .await
            .expect("finish")
    );
    let done = row(pool, id).await;
    assert!(
        !store
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
            .finish(
                &b.lease,
                &Finish::Failed(ErrorObject::new(-32603, "late")),
                None
            )
            .await
            .expect("finish")
    );
    assert!(!store.release(&b.lease).await.expect("release"));
    assert!(
        !store
            .set_status_message(&b.lease, "B after finish")
            .await
            .expect("status")
    );
    assert!(
        store
            .heartbeat(std::slice::from_ref(&b.lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty()
    );
    assert_eq!(row(pool, id).await, done, "a finished task changed");
    assert!(
        store
            .claim("C", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a finished task was claimable"
    );
}

// ---------------------------------------------------------------------------------------
// 2. Heartbeats and cancellation
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
        .heartbeat(std::slice::from_ref(&c1.lease), 60_000)
        .await
        .expect("heartbeat");
    assert_eq!(
        replies,
        vec![HeartbeatReply {
            id: t1.id,
            cancel_requested: false
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
        r["run_after"], r["lease_expires_at"],
        "a held task becomes claimable exactly when its lease lapses"
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
        .heartbeat(&[wrong_token, c1.lease.clone(), wrong_owner], 60_000)
        .await
        .expect("heartbeat");
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].id, t1.id);

    // A lapsed lease cannot be extended.
    force_lapse(pool, t1.id).await;
    let lapsed = row(pool, t1.id).await;
    assert!(
        store
            .heartbeat(std::slice::from_ref(&c1.lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty(),
        "a lapsed lease was extended"
    );
    assert_eq!(row(pool, t1.id).await, lapsed);
    // A lapsed lease counts as not held: cancellation takes effect at once.
    assert_eq!(
        store.cancel_task(&owner, t1.id).await.expect("cancel"),
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
        store.cancel_task(&owner, t2.id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    let rec = found(store, &owner, t2.id).await;
    assert_eq!(rec.status, TaskStatus::Working, "a held task keeps running");
    assert_eq!(rec.lease_owner.as_deref(), Some("W"));
    let requested_at = rec.cancel_requested_at.expect("cancel_requested_at");
    assert_eq!(
        store
            .heartbeat(std::slice::from_ref(&c2.lease), 60_000)
            .await
            .expect("heartbeat"),
        vec![HeartbeatReply {
            id: t2.id,
            cancel_requested: true
        }]
    );
    // Asking again changes nothing about when it was first asked.
    assert_eq!(
        store.cancel_task(&owner, t2.id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    assert_eq!(
        found(store, &owner, t2.id).await.cancel_requested_at,
        Some(requested_at)
    );
    // The worker then records the cancellation.
    assert!(
        store
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
        store.cancel_task(&owner, t3.id).await.expect("cancel"),
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
        store.cancel_task(&owner, t4.id).await.expect("cancel"),
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
            store.cancel_task(&owner, id).await.expect("cancel"),
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
            .finish(&c5.lease, &Finish::Completed(text_result("done")), None)
            .await
            .expect("finish")
    );
    let before = row(pool, t5.id).await;
    assert_eq!(
        store.cancel_task(&owner, t5.id).await.expect("cancel"),
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

// ---------------------------------------------------------------------------------------
// 3. Attempts: lost workers, then CRASH_RECOVERY; cancelled lapsed leases
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_workers_exhaust_attempts() {
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
    assert_eq!(task.max_attempts, 3);
    for attempt in 1..=3 {
        let c = claim_id(store, &format!("lost-{attempt}"), 60_000, id).await;
        assert_eq!(c.task.attempt, attempt);
        assert_eq!(c.reclaimed, attempt > 1, "attempt {attempt}");
        assert_eq!(c.lease.token, i64::from(attempt));
        if attempt == 3 {
            // Held (not lapsed) with no attempts left: not rescue's business yet.
            assert_eq!(
                store.rescue_lapsed(100).await.expect("rescue"),
                RescueReport::default()
            );
            assert_eq!(found(store, &owner, id).await.status, TaskStatus::Working);
        }
        force_lapse(pool, id).await;
    }

    // No attempts left: nobody may claim it again.
    let before = row(pool, id).await;
    assert!(
        store
            .claim("late", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a task with no attempts left was claimed"
    );
    assert_eq!(row(pool, id).await, before);

    assert_eq!(
        store.rescue_lapsed(100).await.expect("rescue"),
        RescueReport {
            failed: 1,
            cancelled: 0
        }
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Failed);
    let error = rec.error.clone().expect("error");
    assert_eq!(error.code, -32603);
    let data = error.data.clone().expect("error.data");
    assert_eq!(data["reason"], json!("CRASH_RECOVERY"));
    assert_eq!(data["attempts"], json!(3));
    let msg = rec.status_message.clone().unwrap_or_default();
    assert!(msg.contains("CRASH_RECOVERY"), "status message: {msg:?}");
    assert_eq!(rec.attempt, 3);
    assert_eq!(rec.lease_owner, None);
    assert_eq!(rec.lease_expires_at, None);
    assert!(rec.finished_at.is_some());
    assert_eq!(rec.result, None);
    // Nothing more to do.
    assert_eq!(
        store.rescue_lapsed(100).await.expect("rescue"),
        RescueReport::default()
    );
    assert!(
        store
            .claim("late", 10, 60_000)
            .await
            .expect("claim")
            .is_empty()
    );

    // A lapsed lease with attempts left and no cancellation is not rescue's: it is
    // reclaimed.
    let t2 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    claim_id(store, "lost", 60_000, t2.id).await;
    force_lapse(pool, t2.id).await;
    assert_eq!(
        store.rescue_lapsed(100).await.expect("rescue"),
        RescueReport::default()
    );
    let again = claim_id(store, "next", 60_000, t2.id).await;
    assert!(again.reclaimed);
    assert_eq!(again.task.attempt, 2);
    assert!(
        store
            .finish(&again.lease, &Finish::Completed(text_result("ok")), None)
            .await
            .expect("finish")
    );

    // A lapsed lease whose cancellation was requested is cancelled, not re-run.
    let t3 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    claim_id(store, "lost", 60_000, t3.id).await;
    assert_eq!(
        store.cancel_task(&owner, t3.id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    force_lapse(pool, t3.id).await;
    let before = row(pool, t3.id).await;
    assert!(
        store
            .claim("next", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a task whose cancellation was requested was re-run"
    );
    assert_eq!(row(pool, t3.id).await, before);
    assert_eq!(
        store.rescue_lapsed(100).await.expect("rescue"),
        RescueReport {
            failed: 0,
            cancelled: 1
        }
    );
    let rec = found(store, &owner, t3.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled);
    assert_eq!(rec.error, None);
    assert_eq!(rec.attempt, 1);
    assert_eq!(rec.lease_owner, None);
    assert!(rec.finished_at.is_some());
    assert_eq!(
        rec.status_message.as_deref(),
        Some("Cancelled at the client's request")
    );
}

/// A task whose cancellation was requested while it was held, and whose worker then
/// released it (graceful shutdown), must not be run again: a client that asked to cancel
/// a task nobody holds gets it cancelled at once, and this is the same situation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_task_with_cancel_requested_is_not_rerun() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let c = claim_id(store, "draining", 60_000, task.id).await;
    assert_eq!(
        store.cancel_task(&owner, task.id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    // The worker shuts down before it saw the cancellation and gives the task back.
    assert!(store.release(&c.lease).await.expect("release"));

    let reclaimed = store.claim("next", 10, 60_000).await.expect("claim");
    assert!(
        reclaimed.is_empty(),
        "the cancelled-by-the-client task was handed to another worker: {:?}",
        reclaimed
            .iter()
            .map(|c| c.lease.clone())
            .collect::<Vec<_>>()
    );
    store.rescue_lapsed(100).await.expect("rescue");
    store.maintain(100, 60_000).await.expect("maintain");
    let rec = found(store, &owner, task.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled, "{rec:?}");
}

// ---------------------------------------------------------------------------------------
// 4. Input keys
// ---------------------------------------------------------------------------------------

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
            .claim("W", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a task waiting for input was claimable"
    );
    // The old lease is gone.
    assert!(
        !store
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
            .claim("W", 10, 60_000)
            .await
            .expect("claim")
            .is_empty()
    );

    // Answering an answered key again, or an unknown key, is ignored (and not validated).
    let before = row(pool, id).await;
    assert_eq!(
        store
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
            .update_inputs(&owner, id, &answers(&[("zzz", json!(42))]), validator)
            .await
            .expect("update"),
        Lookup::Found(Ok(UpdateOutcome::Ignored))
    );
    assert_eq!(row(pool, id).await, before);

    // An invalid answer for the outstanding key is an error and changes nothing.
    match store
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
        store.cancel_task(&owner, id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    let before = row(pool, id).await;
    let fresh = InputRequests::new()
        .elicit("d", "Fresh key?", confirm_schema())
        .into_map();
    assert_eq!(
        store
            .request_input(&c2.lease, &fresh, Some("again"), None)
            .await
            .expect("request_input"),
        InputOutcome::CancelRequested
    );
    assert_eq!(row(pool, id).await, before);
    assert!(store.holds(&c2.lease).await.expect("holds"));
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
            .block_on(store.update_inputs(
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
    let claimed = db.store.claim("W", 1, 60_000).await.expect("claim");
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

// ---------------------------------------------------------------------------------------
// 5. Expiry, retention and tombstones
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_and_retention() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();

    // A task without a ttl, held by a worker for the whole test.
    let forever = create(
        store,
        &owner,
        NewTask {
            ttl_ms: None,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let forever_lease = claim_id(store, "W", 120_000, forever.id).await.lease;

    // A task with ttl 300 ms that nobody runs.
    let started = Instant::now();
    let task = create(
        store,
        &owner,
        NewTask {
            ttl_ms: Some(300),
            retention_ms: 400,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let id = task.id;
    let r = row(pool, id).await;
    assert_ne!(r["expires_at"], Value::Null);
    let consistent: bool = sqlx::query_scalar(
        "SELECT expires_at = created_at + ttl_ms * interval '1 millisecond' FROM tasks WHERE id = $1",
    )
    .bind(id.0)
    .fetch_one(pool)
    .await
    .expect("expires_at");
    assert!(consistent, "expires_at is not created_at + ttl_ms: {r}");
    if started.elapsed() < Duration::from_millis(200) {
        assert_eq!(store.expire_overdue(100).await.expect("expire"), 0);
        assert_eq!(found(store, &owner, id).await.status, TaskStatus::Working);
    }

    eventually(
        Duration::from_secs(10),
        "the task to expire",
        || async move { (store.expire_overdue(100).await.expect("expire") == 1).then_some(()) },
    )
    .await;
    let expired_at = Instant::now();
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Failed);
    assert_eq!(rec.status_message.as_deref(), Some("Task has expired"));
    let error = rec.error.clone().expect("error");
    assert_eq!(error.code, -32603);
    assert_eq!(error.message, "Task has expired");
    let finished = rec.finished_at.expect("finished_at");
    assert!(finished - rec.created_at >= time::Duration::milliseconds(300));
    // ttl_ms is raised so the failed task stays readable for its retention period:
    // created_at + ttl_ms >= finished_at + retention_ms. ttlMs is whole milliseconds, so
    // the comparison allows half a millisecond (see `retained_ttl_covers_retention`).
    let ttl = rec.ttl_ms.expect("ttl_ms");
    let readable_until = i128::from(ttl) * 1000;
    let retained_until = micros(finished - rec.created_at) + i128::from(rec.retention_ms) * 1000;
    assert!(
        readable_until + 500 >= retained_until,
        "ttl_ms {ttl} does not cover retention: readable {readable_until} µs < {retained_until} µs after creation"
    );
    assert!(
        readable_until <= retained_until + 1000,
        "ttl_ms {ttl} raised beyond what retention needs"
    );
    let consistent: bool = sqlx::query_scalar(
        "SELECT expires_at = created_at + ttl_ms * interval '1 millisecond' FROM tasks WHERE id = $1",
    )
    .bind(id.0)
    .fetch_one(pool)
    .await
    .expect("expires_at");
    assert!(
        consistent,
        "expires_at not kept in step with the raised ttl_ms"
    );

    // Not deleted before its retention is over.
    if expired_at.elapsed() < Duration::from_millis(250) {
        assert_eq!(store.purge_expired(100).await.expect("purge"), 0);
        assert_eq!(found(store, &owner, id).await.status, TaskStatus::Failed);
    }
    // Deleted after.
    eventually(
        Duration::from_secs(10),
        "the task to be purged",
        || async move { (store.purge_expired(100).await.expect("purge") == 1).then_some(()) },
    )
    .await;
    assert_eq!(row(pool, id).await, Value::Null, "row not deleted");

    // The owner is told "expired"; nobody else can tell it ever existed.
    assert_eq!(
        store.get_task(&owner, id).await.expect("get"),
        Lookup::Expired
    );
    assert_eq!(
        store
            .get_task(&Owner::new("acme", "bob"), id)
            .await
            .expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        store
            .get_task(&Owner::new("other", "alice"), id)
            .await
            .expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        store.get_task(&owner, TaskId::random()).await.expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        store.cancel_task(&owner, id).await.expect("cancel"),
        Lookup::Expired
    );
    assert_eq!(
        store
            .update_inputs(&owner, id, &answers(&[("k", json!({}))]), validator)
            .await
            .expect("update"),
        Lookup::Expired
    );

    // Young tombstones are kept; old ones are forgotten.
    assert_eq!(
        store
            .purge_tombstones(600_000, 100)
            .await
            .expect("tombstones"),
        0
    );
    assert_eq!(
        store.get_task(&owner, id).await.expect("get"),
        Lookup::Expired
    );
    eventually(Duration::from_secs(10), "the tombstone to go", || async move {
        (store.purge_tombstones(0, 100).await.expect("tombstones") == 1).then_some(())
    })
    .await;
    assert_eq!(
        store.get_task(&owner, id).await.expect("get"),
        Lookup::NotFound
    );

    // A task that completes keeps its result readable for its retention, past its ttl.
    let short = create(
        store,
        &owner,
        NewTask {
            ttl_ms: Some(300),
            retention_ms: 1000,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let c = claim_id(store, "W", 60_000, short.id).await;
    assert!(
        store
            .finish(&c.lease, &Finish::Completed(text_result("kept")), None)
            .await
            .expect("finish")
    );
    let finished_at = Instant::now();
    let rec = found(store, &owner, short.id).await;
    assert!(
        rec.ttl_ms.expect("ttl") >= 1000,
        "ttl_ms not raised at finish: {:?}",
        rec.ttl_ms
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let report = store.maintain(100, 600_000).await.expect("maintain");
    if finished_at.elapsed() < Duration::from_millis(950) {
        assert_eq!(report, MaintenanceReport::default());
        let rec = found(store, &owner, short.id).await;
        assert_eq!(rec.status, TaskStatus::Completed);
        assert_eq!(rec.result, Some(text_result("kept")));
    }
    // ... and is deleted once that is over.
    eventually(
        Duration::from_secs(10),
        "the completed task to be purged",
        || async move { (store.purge_expired(100).await.expect("purge") == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        store.get_task(&owner, short.id).await.expect("get"),
        Lookup::Expired
    );

    // A held task expires too, and its worker loses the lease at that moment.
    let held = create(
        store,
        &owner,
        NewTask {
            ttl_ms: Some(300),
            retention_ms: 60_000,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let held_lease = claim_id(store, "W", 60_000, held.id).await.lease;
    eventually(
        Duration::from_secs(10),
        "the held task to expire",
        || async move { (store.expire_overdue(100).await.expect("expire") == 1).then_some(()) },
    )
    .await;
    let rec = found(store, &owner, held.id).await;
    assert_eq!(rec.status, TaskStatus::Failed);
    assert_eq!(rec.status_message.as_deref(), Some("Task has expired"));
    assert_eq!(rec.lease_owner, None);
    let before = row(pool, held.id).await;
    assert!(!store.holds(&held_lease).await.expect("holds"));
    assert!(
        store
            .heartbeat(std::slice::from_ref(&held_lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty()
    );
    assert!(
        !store
            .finish(
                &held_lease,
                &Finish::Completed(text_result("too late")),
                None
            )
            .await
            .expect("finish")
    );
    assert_eq!(
        row(pool, held.id).await,
        before,
        "the expired task's worker wrote"
    );

    // A task without a ttl never expires, running or finished.
    let rec = found(store, &owner, forever.id).await;
    assert_eq!(rec.status, TaskStatus::Working);
    assert_eq!(rec.ttl_ms, None);
    assert_eq!(row(pool, forever.id).await["expires_at"], Value::Null);
    assert!(
        store
            .finish(
                &forever_lease,
                &Finish::Completed(text_result("done")),
                None
            )
            .await
            .expect("finish")
    );
    let rec = found(store, &owner, forever.id).await;
    assert_eq!(rec.status, TaskStatus::Completed);
    assert_eq!(rec.ttl_ms, None, "finishing gave an unlimited task a ttl");
    assert_eq!(row(pool, forever.id).await["expires_at"], Value::Null);
    let report = store.maintain(100, 600_000).await.expect("maintain");
    assert_eq!((report.expired, report.deleted), (0, 0), "{report:?}");
    assert_eq!(
        found(store, &owner, forever.id).await.status,
        TaskStatus::Completed
    );
}

/// The ttl a task gets when it finishes must keep it readable for its *whole* retention
/// period. `mcp_tasks_retained_ttl` computes `(elapsed seconds * 1000)::bigint +
/// retention`, and numeric-to-bigint rounds to nearest, so whenever the elapsed time has
/// a sub-millisecond part below one half, the task expires up to 0.5 ms before
/// `finished_at + retention_ms`. Checked here with exact, fixed elapsed times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_ttl_covers_retention() {
    let db = TestDb::new().await;
    for elapsed_us in [1_000_000_i64, 1_000_400, 1_000_499, 1_000_500, 1_000_900] {
        // created = now() - elapsed; the task is readable until created + ttl, which must
        // be at least now() + retention.
        let (ttl, covered): (i64, bool) = sqlx::query_as(
            "WITH c AS (SELECT now() - $1 * interval '1 microsecond' AS created)
             SELECT mcp_tasks_retained_ttl(c.created, 1, 400),
                    c.created + mcp_tasks_retained_ttl(c.created, 1, 400) * interval '1 millisecond'
                        >= now() + 400 * interval '1 millisecond'
             FROM c",
        )
        .bind(elapsed_us)
        .fetch_one(&db.pool)
        .await
        .expect("retained ttl");
        assert!(
            covered,
            "elapsed {elapsed_us} µs, retention 400 ms: ttl {ttl} ms ends before the retention does"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 6. Owners never see each other's tasks
// ---------------------------------------------------------------------------------------

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
        assert!(!store.holds(&forged).await.expect("holds"));
        assert!(
            !store
                .set_status_message(&forged, "forged")
                .await
                .expect("status")
        );
        assert!(
            !store
                .save_checkpoint(&forged, &json!(1))
                .await
                .expect("checkpoint")
        );
        assert!(
            store
                .heartbeat(std::slice::from_ref(&forged), 60_000)
                .await
                .expect("heartbeat")
                .is_empty()
        );
        assert!(
            !store
                .finish(&forged, &Finish::Completed(text_result("forged")), None)
                .await
                .expect("finish")
        );
        assert!(!store.release(&forged).await.expect("release"));
        assert_eq!(
            store
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
            store.get_task(other, id).await.expect("get"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(
            store
                .update_inputs(other, id, &yes, validator)
                .await
                .expect("update"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(
            store.cancel_task(other, id).await.expect("cancel"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(row(pool, id).await, before, "{other:?} changed the task");
    }

    // The same calls by the owner do work.
    assert_eq!(
        store
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
            store.cancel_task(other, id).await.expect("cancel"),
            Lookup::NotFound
        );
    }
    assert_eq!(row(pool, id).await, before);
    assert_eq!(
        store.cancel_task(&owner, id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
}

// ---------------------------------------------------------------------------------------
// 7. Migrations from several replicas at once
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations() {
    let db = TestDb::empty().await;
    let url = db.url.clone();

    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(
            Store::connect(
                &url,
                &PoolConfig {
                    max_connections: 2,
                    ..PoolConfig::default()
                },
            )
            .await
            .expect("connect"),
        );
    }
    let empty: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("tables");
    assert_eq!(empty, 0, "the scratch database is not empty");

    let runs: Vec<_> = stores
        .iter()
        .cloned()
        .map(|s| tokio::spawn(async move { s.migrate().await }))
        .collect();
    for (i, run) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        run.expect("migrate task")
            .unwrap_or_else(|e| panic!("migration {i} of 4 failed: {e}"));
    }

    // One row per migration file, each applied successfully.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut files: Vec<i64> = std::fs::read_dir(&dir)
        .expect("migrations dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .map(|n| {
            n.split('_')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("migration file name {n:?}"))
        })
        .collect();
    files.sort_unstable();
    assert!(!files.is_empty());
    let embedded: Vec<i64> = mcp_tasks_store::migration_versions();
    assert_eq!(embedded, files, "embedded migrations differ from the files");

    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .expect("_sqlx_migrations");
    assert_eq!(
        applied,
        files.iter().map(|&v| (v, true)).collect::<Vec<_>>(),
        "each migration applied exactly once"
    );

    // Migrating again is a no-op, and the schema works.
    stores[3].migrate().await.expect("migrate again");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(count, i64::try_from(files.len()).expect("len"));
    let owner = alice();
    let task = create(
        &stores[1],
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    assert_eq!(found(&stores[2], &owner, task.id).await.id, task.id);

    for s in &stores {
        s.close().await;
    }
}

// ---------------------------------------------------------------------------------------
// 8. Many workers, each task runs once
// ---------------------------------------------------------------------------------------

static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn counting_registry() -> Registry {
    let tool = Tool::builder("count_runs")
        .description("Counts how often each task runs.")
        .handler(|ctx| async move {
            let id = ctx.task_id().expect("runs as a task").to_owned();
            *RUNS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(id)
                .or_default() += 1;
            ctx.sleep(Duration::from_millis(5)).await?;
            Ok(Outcome::text("counted"))
        })
        .build()
        .expect("tool");
    Registry::new(vec![tool]).expect("registry")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_each_task_once() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();
    let registry = counting_registry();

    let mut workers = Vec::new();
    for i in 0..4 {
        // Each worker has its own pool, as separate processes would.
        let worker_store = Store::connect(
            &db.url,
            &PoolConfig {
                max_connections: 6,
                ..PoolConfig::default()
            },
        )
        .await
        .expect("connect");
        let mut cfg = worker_config();
        cfg.worker_id = format!("many-{i}");
        cfg.concurrency = 8;
        workers.push(Worker::start_with(&worker_store, registry.clone(), cfg));
    }

    let mut ids = BTreeSet::new();
    for _ in 0..200 {
        let t = create(store, &owner, new_task("count_runs", json!({}))).await;
        ids.insert(t.id.to_string());
    }
    assert_eq!(ids.len(), 200);

    eventually(
        Duration::from_secs(120),
        "all 200 tasks to complete",
        || async move {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'completed'")
                    .fetch_one(pool)
                    .await
                    .expect("count");
            (done == 200).then_some(())
        },
    )
    .await;
    for w in workers {
        w.stop().await;
    }

    let runs: HashMap<String, usize> = {
        let all = RUNS.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter()
            .map(|id| (id.clone(), all.get(id).copied().unwrap_or(0)))
            .collect()
    };
    let wrong: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(wrong.is_empty(), "tasks not run exactly once: {wrong:?}");

    let (total, completed, leased, claims_not_one, attempts_not_one): (i64, i64, i64, i64, i64) =
        sqlx::query_as(
            "SELECT count(*),
                    count(*) FILTER (WHERE status = 'completed' AND result IS NOT NULL
                                     AND finished_at IS NOT NULL),
                    count(*) FILTER (WHERE lease_owner IS NOT NULL),
                    count(*) FILTER (WHERE lease_token <> 1),
                    count(*) FILTER (WHERE attempt <> 1)
             FROM tasks",
        )
        .fetch_one(pool)
        .await
        .expect("summary");
    assert_eq!(total, 200);
    assert_eq!(completed, 200);
    assert_eq!(leased, 0, "leases left held");
    assert_eq!(claims_not_one, 0, "tasks claimed more than once");
    assert_eq!(attempts_not_one, 0, "tasks run in more than one attempt");
}

// ---------------------------------------------------------------------------------------
// 9. Graceful shutdown hands tasks over at once
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_worker_shutdown_releases() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let config = |id: &str| {
        let mut c = worker_config();
        c.worker_id = id.into();
        c.lease = Duration::from_secs(30);
        c.shutdown_grace = Duration::from_millis(300);
        c.cancel_grace = Duration::from_millis(300);
        c
    };
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 60, "label": "graceful"})),
    )
    .await;
    let id = task.id;

    let first = Worker::start_with(store, registry("conformance"), config("graceful-1"));
    let owner_ref = &owner;
    eventually(
        Duration::from_secs(20),
        "graceful-1 to run the task",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("graceful-1")
                && t.status_message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Computing graceful")))
            .then_some(())
        },
    )
    .await;
    first.stop().await;
    let stopped = Instant::now();

    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Working);
    assert_eq!(rec.lease_owner, None, "the task was not released");
    assert_eq!(rec.lease_expires_at, None);
    assert_eq!(rec.attempt, 0, "the interrupted run counted as an attempt");
    assert_eq!(rec.finished_at, None);
    assert_eq!(rec.lease_token, 1);

    let second = Worker::start_with(store, registry("conformance"), config("graceful-2"));
    eventually(
        Duration::from_secs(15),
        "graceful-2 to take over",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("graceful-2")
                && t.status_message.as_deref().is_some_and(|m| {
                    m.starts_with("Running") || m.starts_with("Computing graceful")
                }))
            .then_some(t)
        },
    )
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "taken over only after the lease would have lapsed"
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.attempt, 1, "the released task starts a fresh attempt");
    assert_eq!(rec.lease_token, 2);
    assert_eq!(rec.status, TaskStatus::Working);

    // Finish quickly: cancel it.
    assert_eq!(
        store.cancel_task(&owner, id).await.expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    eventually(
        Duration::from_secs(15),
        "the task to be cancelled",
        || async move {
            (found(store, owner_ref, id).await.status == TaskStatus::Cancelled).then_some(())
        },
    )
    .await;
    second.stop().await;
}

// ---------------------------------------------------------------------------------------
// 10. A crashed worker's task is run again by another
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_in_process_worker_is_replaced() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let config = |id: &str| {
        let mut c = worker_config();
        c.worker_id = id.into();
        c.lease = Duration::from_secs(1);
        c
    };
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 2, "label": "crash"})),
    )
    .await;
    let id = task.id;

    let doomed = IsolatedWorker::start(&db.url, registry("conformance"), config("crash-1"));
    let owner_ref = &owner;
    eventually(
        Duration::from_secs(20),
        "crash-1 to run the task",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("crash-1")
                && t.status_message.as_deref() == Some("Computing crash: 0 of 2 s"))
            .then_some(())
        },
    )
    .await;
    doomed.crash();
    let held = found(store, &owner, id).await;
    assert_eq!(
        held.status,
        TaskStatus::Working,
        "finished before the crash"
    );
    assert_eq!(held.attempt, 1);

    let replacement = Worker::start_with(store, registry("conformance"), config("crash-2"));
    let done = eventually(
        Duration::from_secs(30),
        "the task to complete",
        || async move {
            let t = found(store, owner_ref, id).await;
            t.status.is_terminal().then_some(t)
        },
    )
    .await;
    replacement.stop().await;
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.attempt, 2, "the task was not re-run after the crash");
    assert_eq!(done.lease_token, 2);
    let text = done
        .result
        .as_ref()
        .and_then(|r| r.pointer("/content/0/text"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(text, "Computed crash in 2 s.");
    assert_eq!(done.lease_owner, None);
}

/// `harness::Worker::abort` is documented as simulating a crash, but it aborts only the
/// wrapper task; see the ignore reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_worker_abort_stops_the_worker() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let config = |id: &str| {
        let mut c = worker_config();
        c.worker_id = id.into();
        c.lease = Duration::from_secs(1);
        c
    };
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 2, "label": "abort"})),
    )
    .await;
    let id = task.id;
    let doomed = Worker::start_with(store, registry("conformance"), config("abort-1"));
    let owner_ref = &owner;
    eventually(
        Duration::from_secs(20),
        "abort-1 to run the task",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("abort-1")
                && t.status_message.as_deref() == Some("Computing abort: 0 of 2 s"))
            .then_some(())
        },
    )
    .await;
    doomed.abort();
    let replacement = Worker::start_with(store, registry("conformance"), config("abort-2"));
    let done = eventually(
        Duration::from_secs(30),
        "the task to complete",
        || async move {
            let t = found(store, owner_ref, id).await;
            t.status.is_terminal().then_some(t)
        },
    )
    .await;
    replacement.stop().await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(
        done.attempt, 2,
        "the aborted worker finished the task itself: it was never stopped"
    );
}
