//! The store against a real PostgreSQL: fenced leases and heartbeats, attempts, input
//! keys, expiry and retention, owner isolation, migrations from several processes, the
//! event stream, the reasons the service records for ending a task, group commit against
//! bad requests, the order multi-row writes lock in, what the store pins or bounds, and
//! seeding whole tables (the `testing` feature).
//!
//! Time-dependent negative checks ("not yet expired") are only asserted when the test
//! itself measured that it is still inside the window, so a stalled machine skips the
//! check instead of failing it; waiting for a state always goes through `eventually`.

mod attempt_history;
mod attempts;
mod batched_reads;
mod bounds;
mod console;
mod durability;
mod end_reasons;
mod events;
mod expiry;
mod group_commit;
mod held_input;
mod hot_paths;
mod input_keys;
mod isolation;
mod lanes;
mod leases;
mod lock_order;
mod migrations;
mod queue_by_tool;
mod seeding;
mod statistics;
mod tombstones;
mod workers;

use std::time::Duration;

use mcp_tasks_store::Owner;
use mcp_tasks_tools::validate_input_response;
use sqlx::PgPool;

use crate::harness::eventually;
use serde_json::{Map, Value, json};

pub(super) fn alice() -> Owner {
    Owner::new("acme", "alice")
}

pub(super) fn confirm_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "confirm": { "type": "boolean" } },
        "required": ["confirm"]
    })
}

pub(super) fn name_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "name": { "type": "string" } },
        "required": ["name"]
    })
}

pub(super) fn answers(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

pub(super) fn validator(_key: &str, request: &Value, response: &Value) -> Result<(), String> {
    validate_input_response(request, response)
}

pub(super) fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": false })
}

pub(super) fn sorted(keys: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    let mut v: Vec<String> = keys.into_iter().map(Into::into).collect();
    v.sort();
    v
}

pub(super) fn micros(d: time::Duration) -> i128 {
    d.whole_microseconds()
}

/// How many of this database's backends wait for a lock.
pub(super) async fn lock_waiters(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
    .expect("pg_stat_activity")
}

/// Waits until `n` of this database's backends wait for a lock: statements blocked
/// behind a gate the test holds.
pub(super) async fn until_lock_waiters(pool: &PgPool, n: i64) {
    eventually(
        Duration::from_secs(20),
        "statements waiting for locks",
        || async { (lock_waiters(pool).await >= n).then_some(()) },
    )
    .await;
}
