//! Finishes, written in batches: the finishes of a worker that arrive together become one
//! statement and one commit (see `batch.rs`).

use serde_json::Value;

use crate::sql::checked;
use crate::{DbResult, Lease, Result};

/// One finish waiting for its batch.
pub(crate) struct FinishRequest {
    pub(crate) lease: Lease,
    pub(crate) status: &'static str,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<Value>,
    pub(crate) message: Option<String>,
}

/// Runs one batch of finishes as one statement; `true` for each that landed.
pub(crate) fn finish_batch<'a>(
    pool: &'a sqlx::PgPool,
    batch: &'a [FinishRequest],
) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<bool>>> + Send + 'a>> {
    Box::pin(async move {
        macro_rules! column {
            ($f:expr) => {
                batch.iter().map($f).collect::<Vec<_>>()
            };
        }
        let tenants = column!(|r| r.lease.owner.tenant.as_str());
        let principals = column!(|r| r.lease.owner.principal.as_str());
        let ids = column!(|r| r.lease.id.0);
        let tokens = column!(|r| r.lease.token);
        let statuses = column!(|r| r.status);
        let results = column!(|r| r.result.clone());
        let errors = column!(|r| r.error.clone());
        let messages = column!(|r| r.message.as_deref());
        // `as _`: the macros check arrays of owned, non-null elements only; each array is
        // bound as its `$n::type[]` in the statement says. Each is read through a scalar
        // subquery so that the planner cannot count it: a batch smaller than its guess
        // for an array (10) looks cheaper than the generic plan, and the statement was
        // planned again at nearly every execution (see `views.rs`).
        let done = checked!(query_scalar!(
            "WITH locked AS MATERIALIZED (
                 -- The rows first, in key order: a statement that shares some of them
                 -- (another batch, a replica's watch marks) takes them in the same order,
                 -- so the two wait for each other at worst and never deadlock. Only the
                 -- keys are read here (the results stay in the UPDATE's own unnest).
                 SELECT 1 FROM tasks t
                 JOIN unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::uuid[]),
                             (SELECT $4::bigint[]))
                      AS k(tenant, principal, id, token)
                   ON t.tenant = k.tenant AND t.principal = k.principal AND t.id = k.id
                 WHERE t.lease_token = k.token AND t.status IN ('working', 'input_required')
                   AND t.lease_expires_at IS NOT NULL
                 ORDER BY t.tenant, t.principal, t.id
                 FOR UPDATE OF t
             )
             UPDATE tasks t SET
                 status = u.status,
                 result = u.result,
                 error = u.error,
                 status_message = coalesce(u.message, t.status_message),
                 "
                + FINISH_COLUMNS
                + r#"
             FROM unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::uuid[]),
                         (SELECT $4::bigint[]), (SELECT $5::text[]), (SELECT $6::jsonb[]),
                         (SELECT $7::jsonb[]), (SELECT $8::text[])) WITH ORDINALITY
                  AS u(tenant, principal, id, token, status, result, error, message, n)
             -- Evaluated once, before any row is read: every lock is held by then. The
             -- rows are then found by their key, not their ctid: one a heartbeat changed
             -- since this statement's snapshot is followed to its latest version.
             WHERE (SELECT count(*) FROM locked) >= 0
               AND t.tenant = u.tenant AND t.principal = u.principal AND t.id = u.id
               AND t.lease_token = u.token AND t.status IN ('working', 'input_required')
               -- Held, by the primary key (see FENCED in sql.rs).
               AND t.lease_expires_at IS NOT NULL
             -- A task finished twice in one batch is updated once: the input row that
             -- landed is the one told so.
             RETURNING u.n AS "n!""#,
            &tenants as _,
            &principals as _,
            &ids,
            &tokens,
            &statuses as _,
            &results as _,
            &errors as _,
            &messages as _
        ))
        .fetch_all(pool)
        .await
        .db()?;
        let done: std::collections::HashSet<i64> = done.into_iter().collect();
        Ok((1..=batch.len())
            .map(|n| done.contains(&i64::try_from(n).unwrap_or(0)))
            .collect())
    })
}
