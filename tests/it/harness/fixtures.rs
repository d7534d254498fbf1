//! Fixture builders for the usual set-ups: tasks inserted through the store, claimed
//! leases, whole rows read back, tasks created over HTTP, and JSON edited in place.

use std::time::Duration;

use mcp_tasks_client::Client;
use mcp_tasks_store::{Claimed, Lease, Lookup, NewTask, Owner, Store, TaskId, TaskRecord};
use serde_json::{Map, Value, json};
use sqlx::PgPool;

use super::{status, task_id};

/// The owner a replica with header authentication takes principal `who` to be, as
/// [`super::Replica::client`] sends it (tenant `default`).
pub(crate) fn http_owner(who: &str) -> Owner {
    Owner::new("default", who)
}

/// A task of `tool` with `arguments`: status message "Queued", ttl one hour, polls every
/// 500 ms, kept a minute after it finishes, three attempts. Change fields with
/// `NewTask { ttl_ms: None, ..new_task(…) }`.
pub(crate) fn new_task(tool: &str, arguments: Value) -> NewTask {
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
        client_capabilities: None,
        idempotency: None,
    }
}

/// Inserts `task` through the store, as `owner`.
pub(crate) async fn create(store: &Store, owner: &Owner, task: NewTask) -> TaskRecord {
    store
        .replica()
        .create_task(owner, task)
        .await
        .expect("create_task")
}

/// The task, which must exist for its owner.
pub(crate) async fn found(store: &Store, owner: &Owner, id: TaskId) -> TaskRecord {
    match store.replica().get_task(owner, id).await.expect("get_task") {
        Lookup::Found(task) => task,
        other => panic!("task {id} not found for its owner: {other:?}"),
    }
}

/// Claims exactly one task and checks it is `id`, after the maintenance leader's requeue
/// of lapsed leases (claims read only the queue).
pub(crate) async fn claim_id(store: &Store, worker: &str, lease_ms: i64, id: TaskId) -> Claimed {
    store
        .worker()
        .requeue_lapsed(100)
        .await
        .expect("requeue lapsed leases");
    let mut claimed = store
        .worker()
        .claim(worker, 1, lease_ms)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "{worker} expected to claim task {id}");
    let c = claimed.pop().expect("one claim");
    assert_eq!(c.lease.id, id, "{worker} claimed another task");
    c
}

/// A lease on `id` for `test-worker` (a minute long), as a worker would take it.
pub(crate) async fn leased(store: &Store, id: TaskId) -> Lease {
    let claimed = store
        .worker()
        .claim("test-worker", 10, 60_000)
        .await
        .expect("claim");
    claimed
        .into_iter()
        .find(|c| c.lease.id == id)
        .expect("the task was claimable")
        .lease
}

/// The whole row, every column (including those `TaskRecord` does not carry, such as
/// `run_after` and `expires_at`), or `null` when there is no row.
pub(crate) async fn row(pool: &PgPool, id: TaskId) -> Value {
    sqlx::query_scalar::<_, Value>("SELECT to_jsonb(t) FROM tasks t WHERE id = $1")
        .bind(id.0)
        .fetch_optional(pool)
        .await
        .expect("read row")
        .unwrap_or(Value::Null)
}

/// Makes the current lease of `id` lapse, as if its worker had stopped heartbeating.
pub(crate) async fn force_lapse(pool: &PgPool, id: TaskId) {
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

/// `tools/call` that must become a task: its id and the creation result.
pub(crate) async fn create_task(client: &Client, tool: &str, arguments: Value) -> (String, Value) {
    let created = client
        .call_tool(tool, arguments)
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"));
    assert_eq!(
        created["resultType"], "task",
        "{tool} did not become a task: {created}"
    );
    (task_id(&created), created)
}

/// `tools/call` of a task that then reaches status `until` (within 30 s, polled every
/// 50 ms at most); returns its id.
pub(crate) async fn task_in_status(
    client: &Client,
    tool: &str,
    arguments: Value,
    until: &str,
) -> String {
    let created = client
        .call_tool(tool, arguments)
        .await
        .unwrap_or_else(|e| panic!("creating a {tool} task: {e}"));
    let id = task_id(&created);
    client
        .poll_until(
            &id,
            Duration::from_secs(30),
            Duration::from_millis(50),
            |t| status(t) == until,
        )
        .await
        .unwrap_or_else(|e| panic!("{tool} task never got {until}: {e}"));
    id
}

/// Sets (or, with `None`, removes) the value at `path`, creating objects on the way
/// when it can.
pub(crate) fn set_path(root: &mut Value, path: &[&str], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = root;
    for key in parents {
        let Some(obj) = at.as_object_mut() else {
            return;
        };
        at = obj.entry((*key).to_owned()).or_insert_with(|| json!({}));
    }
    if let Some(obj) = at.as_object_mut() {
        match value {
            Some(v) => {
                obj.insert((*last).to_owned(), v);
            }
            None => {
                obj.remove(*last);
            }
        }
    }
}
