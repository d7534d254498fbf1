//! Claiming: runnable tasks taken in the queue's fair order (`queue_key`, see
//! ARCHITECTURE.md, *Scheduling*) under a fenced lease, in one statement per batch.
//! Claims read the queue only, and a worker's claim only its tools' queues
//! (`tasks_queue_by_tool`): what it reads does not grow with other tools' backlogs, nor
//! with the leases the fleet holds (the maintenance leader requeues lapsed ones: see
//! `leader.rs`).
//!
//! With limits ([`ClaimLimits`]: running tasks at once per tool, upstream, tenant and
//! principal, starts per second per tool and upstream), the statement also counts what
//! runs now (live leases: a killed worker's slots come back when its leases lapse),
//! leaves out of its scan what is at its limit, and admits of the rest what fits. Such
//! claims take a transaction-scoped advisory lock first, one at a time across every
//! worker, so that two claims never both count the same free slot: the statement after
//! the lock sees every claim committed before it. A task held back stays queued, as it
//! was, and no attempt is spent.
//!
//! The batch size and the tools reach the statements through scalar subqueries
//! (`(SELECT $2::int8)`, `unnest((SELECT $6::text[]))`), so that PostgreSQL keeps one
//! generic plan: given their values, a custom plan's estimate is far below the generic
//! plan's guesses, so PostgreSQL planned every claim anew (0.2 to 0.7 ms each, 9 in 10
//! claims by tool in `bench fairness`). Its guesses put the plan's cost past
//! `jit_above_cost` on a large queue, which is why the store's sessions run without JIT.

use std::collections::BTreeMap;

use mcp_tasks_wire::service_messages;
use time::OffsetDateTime;

use crate::record::{Lease, TaskRow};
use crate::sql::task_columns;
use crate::{DbResult, Result, TaskRecord, WorkerStore};

/// The advisory lock limited claims take one at a time ("mcpt", 2).
const LIMITS_LOCK: (i32, i32) = (0x6d63_7074, 2);

/// A task a worker now holds.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub lease: Lease,
    pub task: TaskRecord,
    /// The previous holder's lease lapsed: its worker was lost.
    pub reclaimed: bool,
    /// Since when the task was claimable (for the pickup delay).
    pub runnable_since: OffsetDateTime,
}

#[derive(Debug, sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    row: TaskRow,
    reclaimed: bool,
    runnable_since: OffsetDateTime,
}

/// What a claim must respect, across every worker: the workers read it from the
/// scheduling policy (every worker must have the same).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimLimits {
    /// Running tasks at once, per tool (by the name it is served under).
    pub tools: BTreeMap<String, u32>,
    /// Running tasks at once, per group of tools (an upstream's), and each tool's group.
    pub groups: BTreeMap<String, u32>,
    pub tool_groups: BTreeMap<String, String>,
    /// Running tasks at once, per tenant named, and for any other tenant.
    pub tenants: BTreeMap<String, u32>,
    pub tenant_default: Option<u32>,
    /// Running tasks at once, per principal (of any tenant).
    pub principal_default: Option<u32>,
    /// Starts per second and the starts let through at once after a quiet spell, per
    /// tool and per group.
    pub tool_rates: BTreeMap<String, Rate>,
    pub group_rates: BTreeMap<String, Rate>,
}

/// A token bucket: `per_second` tokens a second, at most `burst` kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

impl ClaimLimits {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
            && self.groups.is_empty()
            && self.tenants.is_empty()
            && self.tenant_default.is_none()
            && self.principal_default.is_none()
            && self.tool_rates.is_empty()
            && self.group_rates.is_empty()
    }
}

fn count(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl WorkerStore {
    /// Claims up to `limit` runnable tasks of any tool in one statement (see
    /// [`WorkerStore::claim_within`]).
    pub async fn claim(&self, worker: &str, limit: i64, lease_ms: i64) -> Result<Vec<Claimed>> {
        self.claim_tools(worker, limit, lease_ms, &[]).await
    }

    /// Claims up to `limit` runnable tasks of `tools` (empty: any) without limits (see
    /// [`WorkerStore::claim_within`]).
    pub async fn claim_tools(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
        tools: &[String],
    ) -> Result<Vec<Claimed>> {
        self.claim_within(worker, limit, lease_ms, tools, &ClaimLimits::default())
            .await
    }

    /// Claims up to `limit` runnable tasks in one statement, in the queue's fair order.
    /// With `tools`, only tasks of those tools (a worker claims what it can run), read
    /// from those tools' queues only; empty means any tool. Claims read only the queue:
    /// a lapsed lease is put back in it by the maintenance leader
    /// ([`WorkerStore::requeue_lapsed`]), where it keeps its place. Nothing is claimed
    /// past `limits` (see the module).
    #[tracing::instrument(name = "db.lease.claim", skip_all, fields(worker = worker), err(level = "debug"))]
    pub async fn claim_within(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
        tools: &[String],
        limits: &ClaimLimits,
    ) -> Result<Vec<Claimed>> {
        let rows: Vec<ClaimedRow> = if limits.is_empty() {
            let statement = if tools.is_empty() {
                CLAIM
            } else {
                CLAIM_BY_TOOL
            };
            sqlx::query_as(statement)
                .bind(worker)
                .bind(limit)
                .bind(lease_ms)
                .bind(service_messages::RUNNING)
                .bind(service_messages::RUNNING_AGAIN)
                .bind(tools)
                .fetch_all(self.db.pool())
                .await
                .db()?
        } else {
            let mut tx = self.db.pool().begin().await.db()?;
            sqlx::query!(
                "SELECT pg_advisory_xact_lock($1, $2)",
                LIMITS_LOCK.0,
                LIMITS_LOCK.1
            )
            .execute(&mut *tx)
            .await
            .db()?;
            let args = LimitArgs::of(limits);
            let statement = if tools.is_empty() {
                CLAIM_LIMITED
            } else {
                CLAIM_LIMITED_BY_TOOL
            };
            let claim = sqlx::query_as(statement)
                .bind(worker)
                .bind(limit)
                .bind(lease_ms)
                .bind(service_messages::RUNNING)
                .bind(service_messages::RUNNING_AGAIN)
                .bind(tools);
            let rows = args.bind(claim).fetch_all(&mut *tx).await.db()?;
            tx.commit().await.db()?;
            rows
        };
        rows.into_iter()
            .map(|r| {
                let task: TaskRecord = r.row.try_into()?;
                Ok(Claimed {
                    lease: Lease {
                        owner: task.owner.clone(),
                        id: task.id,
                        token: task.lease_token,
                    },
                    task,
                    reclaimed: r.reclaimed,
                    runnable_since: r.runnable_since,
                })
            })
            .collect()
    }
}

/// What makes a row claimable now: queued (the predicate of both queue indexes,
/// `tasks_queue_order` and `tasks_queue_by_tool`), runnable, not being cancelled, and not
/// past its TTL (expiry finishes those).
macro_rules! claimable {
    () => {
        "status = 'working' AND lease_owner IS NULL AND run_after <= now()
          AND cancel_requested_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
    };
}

/// The columns a claim's candidates carry: where the row is, its id, whether its last
/// lease lapsed (the maintenance leader requeued it: this claim is a reclaim), since when
/// it is runnable (for the pickup delay), and its key (for the clock).
macro_rules! candidate_columns {
    () => {
        "ctid AS c_ctid, id AS c_id, lease_lapsed AS reclaimed, run_after AS runnable_since,
            queue_key AS c_key"
    };
}

/// `$name`: the first `$take` claimable rows of the tools `$6` (empty: any) matching
/// `$filter`, in claim order, locked: a walk of `tasks_queue_order`, past other tools'
/// tasks when there is a filter (see [`queue_by_tool`] for that).
macro_rules! queue_any_tool {
    ($name:literal, $cols:expr, $filter:expr, $take:literal) => {
        concat!(
            $name,
            " AS MATERIALIZED (
        SELECT ",
            $cols,
            "
        FROM tasks
        WHERE ",
            claimable!(),
            "
          AND (cardinality($6::text[]) = 0 OR tool = ANY($6::text[]))",
            $filter,
            "
        ORDER BY queue_key
        LIMIT ",
            $take,
            "
        FOR UPDATE SKIP LOCKED
    ),"
        )
    };
}

/// `$name`: `$take` claimable rows of the tools `$tools` (a FROM item of `f(tool)`)
/// matching `$filter`, in claim order within each tool, locked, reading only those tools'
/// queues (`tasks_queue_by_tool`), never past another tool's backlog.
///
/// - `active`: the tools with anything claimable: an index probe each, from the tail of
///   the tool's queue, where the newest tasks are, since its head is where the claims
///   running now leave the entries of the rows they took (dead, each visited in the heap
///   until vacuum or a scan marks it), which a probe from the head walked first. With
///   one tool, none: the claim of its share comes back empty when there is nothing.
/// - `heads`: when more than one is, each one's first rows, not locked, merged in key
///   order: `$take` index entries per tool. The tool is matched as `tool >= f.tool AND tool <= f.tool` and
///   ordered by `tool, queue_key`, not `tool = f.tool`: with the equality the planner
///   counts the tool as settled, sees `tasks_queue_order` giving the same order, and (the
///   generic plan guessing a third of the queue per tool) walks it past every other
///   tool's task, 1,500 buffers instead of 11 behind a backlog of 20,000.
/// - `shares`: how many of the first `$take` each tool has; with one tool active, all of
///   them, and `heads` is not read at all.
/// - Then each tool's share, locked in that tool's queue (`SKIP LOCKED`): claims running
///   side by side skip each other's rows and take the tool's next ones, so none comes
///   back short while work is queued (which would send a worker to sleep), and none
///   locks more rows than it takes. Under such contention the mix of tools in a batch
///   follows the heads, not exactly the key order across tools; within a tool (so
///   between tenants and principals) the order is the fair one.
macro_rules! queue_by_tool {
    ($name:literal, $cols:expr, $tools:expr, $filter:expr, $take:literal) => {
        concat!(
            r"
    active AS MATERIALIZED (
        SELECT f.tool
        FROM ",
            $tools,
            r"
        WHERE cardinality((SELECT $6::text[])) = 1 OR coalesce((
            SELECT true FROM tasks
            WHERE tool >= f.tool AND tool <= f.tool AND ",
            claimable!(),
            $filter,
            r"
            ORDER BY tool DESC, queue_key DESC
            LIMIT 1
        ), false)
    ),
    heads AS MATERIALIZED (
        SELECT h.tool AS h_tool
        FROM active a
        CROSS JOIN LATERAL (
            SELECT tool, queue_key
            FROM tasks
            WHERE tool >= a.tool AND tool <= a.tool AND ",
            claimable!(),
            $filter,
            r"
            ORDER BY tool, queue_key
            LIMIT ",
            $take,
            r"
        ) h
        ORDER BY h.queue_key
        LIMIT ",
            $take,
            r"
    ),
    shares AS (
        SELECT tool AS h_tool, ",
            $take,
            r" AS n FROM active WHERE (SELECT count(*) FROM active) = 1
        UNION ALL
        SELECT h_tool, count(*) FROM heads WHERE (SELECT count(*) FROM active) > 1
        GROUP BY h_tool
    ),
    ",
            $name,
            r" AS MATERIALIZED (
        SELECT m.*
        FROM shares s
        CROSS JOIN LATERAL (
            SELECT ",
            $cols,
            r"
            FROM tasks
            WHERE tool >= s.h_tool AND tool <= s.h_tool AND ",
            claimable!(),
            $filter,
            r"
            ORDER BY tool, queue_key
            LIMIT s.n
            FOR UPDATE SKIP LOCKED
        ) m
    ),"
        )
    };
}

/// What both claims end with, after `candidates` (of [`candidate_columns`]): the
/// worker's clock, the update of the chosen rows, and the rows.
macro_rules! claim_tail {
    () => {
        concat!(
            r"
            -- The queue's clock moves to the highest key this worker has claimed (its own
            -- row: claims never wait on each other for it). New lanes start there.
            clocked AS (
                INSERT INTO queue_clock AS k (worker, key)
                SELECT $1, max(c_key) FROM candidates HAVING max(c_key) IS NOT NULL
                ON CONFLICT (worker) DO UPDATE
                    SET key = greatest(k.key, EXCLUDED.key), at = now()
            ),",
            update_tail!()
        )
    };
}

/// The update of the chosen rows and what the claim returns.
macro_rules! update_tail {
    () => {
        concat!(
            r"
            -- The rows are updated where the locks found them (by ctid: a TID scan). A
            -- join on the key would be planned for the generic plan's guess of the
            -- LIMIT (a tenth of the queue) and so as a hash join over a scan of the whole
            -- table, which made every claim as slow as the table is big. The rows are
            -- locked, so nobody moves them before this update; one that had moved
            -- would fail the condition and simply not be claimed.
            claimed AS (
                UPDATE tasks t SET
                    lease_owner = $1,
                    lease_token = t.lease_token + 1,
                    lease_expires_at = now() + $3 * interval '1 millisecond',
                    lease_lapsed = false,
                    input_requests = NULL,
                    -- Out of the queue's indexes; leased rows are found by tasks_leased.
                    run_after = NULL,
                    attempt = t.attempt + 1,
                    claimed_attempt = t.attempt + 1,
                    -- The run's claim, for its history (the row is rewritten here anyway),
                    -- and its pickup delay: from when it became runnable (created,
                    -- answered, released or its lease lapsed) to now.
                    claimed_at = now(),
                    claimed_by = $1,
                    pickup_ms = least(greatest(
                        EXTRACT(EPOCH FROM now() - t.run_after) * 1000, 0), 2147483647)::integer,
                    status_message = CASE WHEN t.attempt = 0 THEN $4
                        ELSE replace($5, '{attempt}', (t.attempt + 1)::text) END,
                    updated_at = now(),
                    version = t.version + 1
                WHERE t.ctid = ANY (ARRAY(SELECT c_ctid FROM candidates))
                RETURNING ",
            task_columns!(),
            r"
            )
            SELECT claimed.*, c.reclaimed, c.runnable_since
            FROM claimed JOIN candidates c ON c.c_id = claimed.id"
        )
    };
}

/// The claim without limits, any tool: `$1` worker, `$2` rows wanted, `$3` lease (ms),
/// `$4`, `$5` the status messages of a first and a later attempt, `$6` the tools (empty:
/// any; a worker's claim is [`CLAIM_BY_TOOL`]). Built at run time, not checked by `query_as!`: its row flattens a `TaskRow`,
/// which the macros cannot fill. Public to the benchmarks (the `testing` feature), which
/// issue it raw beside [`OLDEST_FIRST_CLAIM`].
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub const CLAIM: &str = concat!(
    "WITH ",
    queue_any_tool!("candidates", candidate_columns!(), "", "(SELECT $2::int8)"),
    claim_tail!()
);

/// The claim without limits, of the tools `$6` only (what a worker claims: the tools it
/// can run).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub const CLAIM_BY_TOOL: &str = concat!(
    "WITH ",
    queue_by_tool!(
        "candidates",
        candidate_columns!(),
        "unnest((SELECT $6::text[])) AS f(tool)",
        "",
        "(SELECT $2::int8)"
    ),
    claim_tail!()
);

/// The claim as it was before fair scheduling: the queue oldest first across everyone
/// (on `tasks_queued`), and no clock. What `mcp-tasks bench fairness` compares the fair
/// claim with; same parameters and rows.
#[cfg(feature = "testing")]
pub const OLDEST_FIRST_CLAIM: &str = concat!(
    "WITH candidates AS MATERIALIZED (
        SELECT ",
    candidate_columns!(),
    "
        FROM tasks
        WHERE ",
    claimable!(),
    "
          AND (cardinality($6::text[]) = 0 OR tool = ANY($6::text[]))
        ORDER BY run_after
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),",
    update_tail!()
);

mod limits;

pub use limits::HeldBack;
use limits::{CLAIM_LIMITED, CLAIM_LIMITED_BY_TOOL, LimitArgs};
