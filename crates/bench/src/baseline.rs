//! The raw-SQL baselines: what PostgreSQL does with the same statements when nothing of
//! ours stands in between, issued from this process over TCP, prepared, at the same
//! concurrency as the measurement they are compared with.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::load::Run;
use crate::stats::Summary;

/// The owner every benchmark task belongs to: the one a replica without authentication
/// gives every caller.
pub(crate) const TENANT: &str = "default";
pub(crate) const PRINCIPAL: &str = "anonymous";

/// One operation of a baseline, given its sequence number.
pub(crate) type Op = Arc<dyn Fn(PgPool, u64) -> BoxFuture<'static, sqlx::Result<()>> + Send + Sync>;

/// `concurrency` clients, each running `op` back to back for `duration`, on connections of
/// their own (at most 32: the server is shared, and the service's requests share its
/// pool too), opened before the clock starts and closed afterwards.
pub(crate) async fn drive(
    url: &str,
    concurrency: usize,
    duration: Duration,
    op: Op,
) -> anyhow::Result<Run> {
    let connections = concurrency.min(32);
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(connections)?)
        .connect(url)
        .await?;
    let mut warm = Vec::new();
    for _ in 0..connections {
        warm.push(pool.acquire().await?);
    }
    drop(warm);
    let run = drive_on(&pool, concurrency, duration, op).await;
    pool.close().await;
    run
}

async fn drive_on(
    pool: &PgPool,
    concurrency: usize,
    duration: Duration,
    op: Op,
) -> anyhow::Result<Run> {
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let (pool, stop, counter, op) = (pool.clone(), stop.clone(), counter.clone(), op.clone());
        set.spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut first = None;
            while !stop.load(Ordering::Relaxed) {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let sent = Instant::now();
                match op(pool.clone(), n).await {
                    Ok(()) => latencies.push(sent.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first.get_or_insert(e.to_string());
                    }
                }
            }
            (latencies, errors, first)
        });
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let (mut latencies, mut errors, mut first_error) = (Vec::new(), 0, None);
    while let Some(joined) = set.join_next().await {
        let (l, e, f) = joined?;
        latencies.extend(l);
        errors += e;
        first_error = first_error.or(f);
    }
    Ok(Run {
        ok: latencies.len() as u64,
        errors,
        elapsed: started.elapsed(),
        latency: Summary::of(latencies),
        first_error,
    })
}

/// The one-row INSERT of a create, on its own (autocommit).
pub(crate) fn insert() -> Op {
    Arc::new(|pool, _| {
        Box::pin(async move {
            // The store's own statement (its `testing` feature), not a column list of ours.
            sqlx::query(mcp_tasks_store::testing::RAW_CREATE)
                .bind(TENANT)
                .bind(PRINCIPAL)
                .bind(Uuid::new_v4())
                .execute(&pool)
                .await?;
            Ok(())
        })
    })
}

/// The primary-key select of a `tasks/get`: the columns the answer needs.
pub(crate) const GET: &str = r"
    SELECT status, status_message, created_at, updated_at, ttl_ms, poll_interval_ms,
           input_requests, result, error, end_reason, attempt
    FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3";

pub(crate) fn get(id: Uuid) -> Op {
    Arc::new(move |pool, _| {
        Box::pin(async move {
            sqlx::query(GET)
                .bind(TENANT)
                .bind(PRINCIPAL)
                .bind(id)
                .fetch_one(&pool)
                .await?;
            Ok(())
        })
    })
}

/// Claims one runnable task (the usual `FOR UPDATE SKIP LOCKED` claim, one row).
pub(crate) const CLAIM: &str = r"
    WITH c AS MATERIALIZED (
        SELECT tenant, principal, id FROM tasks
        WHERE status = 'working' AND lease_owner IS NULL AND run_after <= now()
        ORDER BY run_after LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE tasks t SET lease_owner = 'raw', lease_token = t.lease_token + 1,
        lease_expires_at = now() + interval '30 seconds', attempt = t.attempt + 1,
        status_message = 'Running', updated_at = now(), version = t.version + 1
    FROM c WHERE t.tenant = c.tenant AND t.principal = c.principal AND t.id = c.id
    RETURNING t.tenant, t.principal, t.id, t.lease_token";

/// The result the raw lifecycle completes tasks with: what `slow_compute` answers.
pub(crate) const COMPLETED_RESULT: &str =
    r#"{"content":[{"type":"text","text":"Computed job in 0 s."}],"isError":false}"#;

/// Completes a claimed task, fenced by its token.
pub(crate) const COMPLETE: &str = r"
    UPDATE tasks SET status = 'completed', result = $5, status_message = 'Completed',
        finished_at = now(), updated_at = now(), version = version + 1,
        run_after = NULL, lease_owner = NULL, lease_expires_at = NULL
    WHERE tenant = $1 AND principal = $2 AND id = $3 AND lease_token = $4
      AND status = 'working'";

/// The raw lifecycle: create, claim, complete, each its own transaction, unbatched.
pub(crate) fn cycle() -> Op {
    Arc::new(|pool, _| {
        Box::pin(async move {
            insert()(pool.clone(), 0).await?;
            let claimed: Option<(String, String, Uuid, i64)> =
                sqlx::query_as(CLAIM).fetch_optional(&pool).await?;
            if let Some((tenant, principal, id, token)) = claimed {
                sqlx::query(COMPLETE)
                    .bind(tenant)
                    .bind(principal)
                    .bind(id)
                    .bind(token)
                    .bind(completed_result())
                    .execute(&pool)
                    .await?;
            }
            Ok(())
        })
    })
}

/// [`COMPLETED_RESULT`] as a value.
fn completed_result() -> serde_json::Value {
    serde_json::json!({
        "content": [{ "type": "text", "text": "Computed job in 0 s." }],
        "isError": false
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_completed_result_is_the_same_as_text_and_as_a_value() {
        let text: serde_json::Value =
            serde_json::from_str(super::COMPLETED_RESULT).expect("valid JSON");
        assert_eq!(text, super::completed_result());
    }
}
