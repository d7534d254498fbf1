//! Waiting for the benchmark's tasks to finish, and reading when they did, at a cost to
//! the database that does not grow with the run.
//!
//! The obvious `WHERE id = ANY($ids)` is a scan of the whole table that compares every
//! row with every id (no index leads with the id, and a prepared statement's generic
//! plan does not hash the array): with 30k tasks one poll took 2.7 s of a core, which the
//! worker being measured then lacked. So the ids are looked up by primary key, with their
//! owner, and a poll looks at the newest unfinished ones only (tasks are claimed oldest
//! first): all of them are checked only once those are done.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use crate::baseline;

/// How many of the newest unfinished tasks a poll looks at.
const TAIL: usize = 256;

/// Ids per statement when all of them are looked up.
const CHUNK: usize = 8192;

/// Whose tasks the benchmark created: the owner a replica without authentication gives
/// every caller when the benchmark started it, else the owner of the first task.
pub(crate) async fn owner(
    sql: &PgPool,
    started_here: bool,
    ids: &[Uuid],
) -> anyhow::Result<(String, String)> {
    let Some(first) = ids.first().filter(|_| !started_here) else {
        return Ok((baseline::TENANT.to_owned(), baseline::PRINCIPAL.to_owned()));
    };
    // One scan, once per measurement, and only against a service given by URL.
    let owner: Option<(String, String)> =
        sqlx::query_as("SELECT tenant, principal FROM tasks WHERE id = $1")
            .bind(first)
            .fetch_optional(sql)
            .await?;
    owner.ok_or_else(|| anyhow::anyhow!("the task {first} is not in the database"))
}

/// The ids among `ids` (of `owner`) that have not finished.
async fn open(sql: &PgPool, owner: &(String, String), ids: &[Uuid]) -> anyhow::Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT u.id FROM unnest($3::uuid[]) AS u(id)
         JOIN tasks t ON t.tenant = $1 AND t.principal = $2 AND t.id = u.id
         WHERE t.finished_at IS NULL",
    )
    .bind(&owner.0)
    .bind(&owner.1)
    .bind(ids)
    .fetch_all(sql)
    .await?)
}

/// Waits until every task in `ids` (in creation order) has finished; the statements it
/// ran.
pub(crate) async fn wait(
    sql: &PgPool,
    owner: &(String, String),
    ids: &[Uuid],
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pending = ids.to_vec();
    let mut statements = 0;
    while !pending.is_empty() {
        let tail = &pending[pending.len().saturating_sub(TAIL)..];
        statements += 1;
        let open_tail = open(sql, owner, tail).await?;
        if open_tail.is_empty() {
            let mut still = Vec::new();
            for chunk in pending.chunks(CHUNK) {
                statements += 1;
                still.extend(open(sql, owner, chunk).await?);
            }
            let still: std::collections::HashSet<Uuid> = still.into_iter().collect();
            pending.retain(|id| still.contains(id));
            if pending.is_empty() {
                break;
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} tasks never finished",
            pending.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(statements)
}

/// When each finished task of `ids` finished (microseconds since the epoch); the
/// statements it ran.
pub(crate) async fn finished_at(
    sql: &PgPool,
    owner: &(String, String),
    ids: &[Uuid],
) -> anyhow::Result<(Vec<(Uuid, i64)>, u64)> {
    let mut finished = Vec::with_capacity(ids.len());
    let mut statements = 0;
    for chunk in ids.chunks(CHUNK) {
        statements += 1;
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT u.id, (extract(epoch FROM t.finished_at) * 1000000)::bigint
             FROM unnest($3::uuid[]) AS u(id)
             JOIN tasks t ON t.tenant = $1 AND t.principal = $2 AND t.id = u.id
             WHERE t.finished_at IS NOT NULL",
        )
        .bind(&owner.0)
        .bind(&owner.1)
        .bind(chunk)
        .fetch_all(sql)
        .await?;
        finished.extend(rows);
    }
    Ok((finished, statements))
}
