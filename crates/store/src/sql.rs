//! What the store's statements share: the column lists of the row types (`record.rs`,
//! `console/`) and the conditions and assignments that statements of one kind repeat (the
//! fence on a worker's write, what finishing a task sets).
//!
//! `sqlx::query!` and its kin check a statement against the schema at compile time (or
//! against the offline data in the workspace's `.sqlx/`), and take only string literals
//! joined with `+`, not a macro call that would expand to one. So the fragments are named
//! here, and [`checked!`] pastes them into such a statement as literals:
//!
//! ```text
//! checked!(query_as!(TaskRow, "SELECT " + TASK_COLUMNS + " FROM tasks WHERE id = $1", id))
//! ```
//!
//! Statements built or chosen at run time (the console's, whose plans are also read with
//! `EXPLAIN`) paste the same fragments with `concat!` through the `*_columns!` macros.

/// Every column of a `TaskRow` (`record.rs`), for the statements built at run time: the
/// same list as `TASK_COLUMNS` in [`checked!`], which is where it is written.
macro_rules! task_columns {
    () => {
        $crate::sql::checked!(@sql [concat!] [] TASK_COLUMNS)
    };
}
pub(crate) use task_columns;

/// The columns of a `SummaryRow` (`console/mod.rs`): no arguments, answers or result.
macro_rules! summary_columns {
    () => {
        "tenant, principal, id, tool, status, status_message, end_reason, created_at,
         updated_at, coalesce(claimed_attempt, attempt) AS attempt, max_attempts"
    };
}
pub(crate) use summary_columns;

/// A statement of the `sqlx::query!` family with the shared fragments pasted in, so that
/// it is checked at compile time like any other:
///
/// - `TASK_COLUMNS`: every column of a `TaskRow`;
/// - `VIEW_COLUMNS`: the columns of a `ViewRow`, what `tasks/get` shows (its stored JSON
///   read as text: `RawValue`);
/// - `FENCED`: the guard on every worker write, with the lease's owner, task and token as
///   `$1` to `$4`: the same lease (token), still held, and the task working or waiting for
///   input its run asked for while holding it (see `held_input.rs`). "Held" is written
///   `lease_expires_at IS NOT NULL`, which the table's CHECK (`tasks_lease_complete`)
///   makes the same as `lease_owner IS NOT NULL`, so that the planner cannot prove the
///   predicate of `tasks_leased` and scan that index instead of the primary key: between
///   vacuums it holds an entry for every task claimed since (dead, but each visited in
///   the heap), and a finish batch planned over it took 27 ms at 10k claims, growing until
///   autovacuum came by; by the primary key it takes 2 ms. A lease that lapsed is not
///   checked here: every claim bumps the token, so a lapsed lease that nobody claimed
///   since is still the only one (after a database outage its worker takes it back and
///   goes on), and one that somebody claimed can never write again. Expiry, rescue and
///   cancellation all change the status, which fences them too;
/// - `FINISH_COLUMNS`: what every statement that finishes a task sets: no lease, not
///   runnable, and `ttl_ms` raised so the task stays readable for its retention.
///
/// The first `,` outside the statement ends it; the arguments follow as for sqlx, the
/// first of them `@lease(lease)` for the four of `FENCED`.
macro_rules! checked {
    (query!($($rest:tt)*)) => {
        $crate::sql::checked!(@sql [sqlx::query!] [] $($rest)*)
    };
    (query_as!($out:ident, $($rest:tt)*)) => {
        $crate::sql::checked!(@sql [sqlx::query_as!] [$out,] $($rest)*)
    };
    (query_scalar!($($rest:tt)*)) => {
        $crate::sql::checked!(@sql [sqlx::query_scalar!] [] $($rest)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] TASK_COLUMNS $($rest:tt)*) => {
        $crate::sql::checked!(@sql [$($mac)*] [$($sql)* "tenant, principal, id, tool,
            arguments, trace_context, status, status_message, created_at, updated_at,
            finished_at, ttl_ms, poll_interval_ms, retention_ms, result, error, input_requests,
            input_responses, issued_keys, checkpoint, lease_owner, lease_token, lease_expires_at,
            attempt, max_attempts, cancel_requested_at, version, request_digest, end_reason,
            client_capabilities, claimed_attempt"] $($rest)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] VIEW_COLUMNS $($rest:tt)*) => {
        $crate::sql::checked!(@sql [$($mac)*] [$($sql)* r#"id, status, status_message,
            created_at, updated_at, ttl_ms, poll_interval_ms, result AS "result: _", error,
            input_requests AS "input_requests: _", attempt, end_reason"#] $($rest)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] FENCED $($rest:tt)*) => {
        $crate::sql::checked!(@sql [$($mac)*] [$($sql)* "tenant = $1 AND principal = $2
            AND id = $3 AND lease_token = $4 AND status IN ('working', 'input_required')
            AND lease_expires_at IS NOT NULL"] $($rest)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] FINISH_COLUMNS $($rest:tt)*) => {
        $crate::sql::checked!(@sql [$($mac)*] [$($sql)* "finished_at = now(),
            updated_at = now(),
            version = version + 1,
            run_after = NULL,
            lease_owner = NULL,
            lease_expires_at = NULL,
            input_requests = NULL,
            ttl_ms = mcp_tasks_retained_ttl(created_at, ttl_ms, retention_ms),
            expires_at = created_at
                + mcp_tasks_retained_ttl(created_at, ttl_ms, retention_ms)
                  * interval '1 millisecond'"] $($rest)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] , @lease($lease:expr) $($args:tt)*) => {
        $($mac)*($($sql)*, &$lease.owner.tenant, &$lease.owner.principal, $lease.id.0,
            $lease.token $($args)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] , $($args:tt)*) => {
        $($mac)*($($sql)*, $($args)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*]) => {
        $($mac)*($($sql)*)
    };
    (@sql [$($mac:tt)*] [$($sql:tt)*] $token:tt $($rest:tt)*) => {
        $crate::sql::checked!(@sql [$($mac)*] [$($sql)* $token] $($rest)*)
    };
}
pub(crate) use checked;
