//! Claiming: runnable tasks taken in the queue's fair order (`queue_key`, see
//! ARCHITECTURE.md, *Scheduling*) under a fenced lease, in one statement per batch.
//!
//! With limits ([`ClaimLimits`]: running tasks at once per tool, upstream, tenant and
//! principal, starts per second per tool and upstream), the statement also counts what
//! runs now (live leases: a killed worker's slots come back when its leases lapse),
//! leaves out of its scan what is at its limit, and admits of the rest what fits. Such
//! claims take a transaction-scoped advisory lock first, one at a time across every
//! worker, so that two claims never both count the same free slot: the statement after
//! the lock sees every claim committed before it. A task held back stays queued, as it
//! was, and no attempt is spent.

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

    /// Claims up to `limit` runnable tasks of `tools` (empty: any), lapsed leases too,
    /// without limits (see [`WorkerStore::claim_within`]).
    pub async fn claim_tools(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
        tools: &[String],
    ) -> Result<Vec<Claimed>> {
        self.claim_within(
            worker,
            limit,
            lease_ms,
            tools,
            true,
            &ClaimLimits::default(),
        )
        .await
    }

    /// Like [`WorkerStore::claim_tools`], from the queue only: lapsed leases are left for the
    /// next full claim.
    pub async fn claim_queued(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
        tools: &[String],
    ) -> Result<Vec<Claimed>> {
        self.claim_within(
            worker,
            limit,
            lease_ms,
            tools,
            false,
            &ClaimLimits::default(),
        )
        .await
    }

    /// Claims up to `limit` runnable tasks in one statement, in the queue's fair order.
    /// With `tools`, only tasks of those tools (a worker claims what it can run); empty
    /// means any tool. With `lapsed`, tasks whose previous lease lapsed are reclaimed
    /// first (those with no attempts left are not: see [`WorkerStore::rescue_lapsed`]);
    /// without, the queue only (for the claims a worker makes whenever a slot frees up:
    /// looking for lapsed leases once per poll interval is enough, since recovery takes
    /// a lease plus a poll anyway). Nothing is claimed past `limits` (see the module).
    #[tracing::instrument(name = "db.lease.claim", skip_all, fields(worker = worker), err(level = "debug"))]
    pub async fn claim_within(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
        tools: &[String],
        lapsed: bool,
        limits: &ClaimLimits,
    ) -> Result<Vec<Claimed>> {
        let rows: Vec<ClaimedRow> = if limits.is_empty() {
            sqlx::query_as(CLAIM)
                .bind(worker)
                .bind(limit)
                .bind(lease_ms)
                .bind(service_messages::RUNNING)
                .bind(service_messages::RUNNING_AGAIN)
                .bind(tools)
                .bind(lapsed)
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
            let conc = limits
                .tools
                .iter()
                .map(|(name, max)| ("tool", name, *max))
                .chain(
                    limits
                        .groups
                        .iter()
                        .map(|(name, max)| ("group", name, *max)),
                );
            let (conc_kinds, conc_names, conc_max): (Vec<&str>, Vec<&str>, Vec<i32>) = conc
                .map(|(kind, name, max)| (kind, name.as_str(), count(max)))
                .collect();
            let rates = limits
                .tool_rates
                .iter()
                .map(|(name, rate)| ("tool", name, rate))
                .chain(
                    limits
                        .group_rates
                        .iter()
                        .map(|(name, rate)| ("group", name, rate)),
                );
            let mut rate_kinds = Vec::new();
            let mut rate_names = Vec::new();
            let mut per_second = Vec::new();
            let mut burst = Vec::new();
            for (kind, name, rate) in rates {
                rate_kinds.push(kind);
                rate_names.push(name.as_str());
                per_second.push(rate.per_second);
                burst.push(rate.burst.max(1.0));
            }
            let rows = sqlx::query_as(CLAIM_LIMITED)
                .bind(worker)
                .bind(limit)
                .bind(lease_ms)
                .bind(service_messages::RUNNING)
                .bind(service_messages::RUNNING_AGAIN)
                .bind(tools)
                .bind(lapsed)
                .bind(conc_kinds)
                .bind(conc_names)
                .bind(conc_max)
                .bind(limits.tool_groups.keys().collect::<Vec<_>>())
                .bind(limits.tool_groups.values().collect::<Vec<_>>())
                .bind(limits.tenants.keys().collect::<Vec<_>>())
                .bind(
                    limits
                        .tenants
                        .values()
                        .map(|m| count(*m))
                        .collect::<Vec<_>>(),
                )
                .bind(limits.tenant_default.map(count))
                .bind(limits.principal_default.map(count))
                .bind(rate_kinds)
                .bind(rate_names)
                .bind(per_second)
                .bind(burst)
                .fetch_all(&mut *tx)
                .await
                .db()?;
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

/// What both claims end with: the worker's clock, the update of the chosen rows
/// (`candidates`: `c_ctid`, `c_id`, `reclaimed`, `runnable_since`, `c_key`), and the rows.
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
                    -- A lapsed run's held input request (held_input.rs) died with it.
                    status = 'working',
                    input_requests = NULL,
                    lease_owner = $1,
                    lease_token = t.lease_token + 1,
                    lease_expires_at = now() + $3 * interval '1 millisecond',
                    -- Out of the queue's index; leased rows are found by tasks_leased.
                    run_after = NULL,
                    attempt = t.attempt + 1,
                    claimed_attempt = t.attempt + 1,
                    -- The run's claim, for its history (the row is rewritten here anyway);
                    -- runnable since as the candidates say: a lapsed lease's expiry, or
                    -- the queued task's run_after.
                    claimed_at = now(),
                    claimed_by = $1,
                    pickup_ms = least(greatest(EXTRACT(EPOCH FROM now() - CASE
                        WHEN t.lease_owner IS NOT NULL THEN t.lease_expires_at
                        ELSE t.run_after END) * 1000, 0), 2147483647)::integer,
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

/// Lapsed leases, then the queue in `$order`, as `candidates`.
macro_rules! claim_head {
    ($order:literal) => {
        concat!(
            r"
    -- Leases that lapsed with attempts left (few rows: only leased ones are in
    -- tasks_leased), then the queue in order (the fair order on tasks_queue_order); none
    -- past its TTL. Each with the moment it became runnable (for the pickup metric).
    WITH lapsed AS MATERIALIZED (
        SELECT ctid AS c_ctid, id AS c_id, true AS reclaimed,
            lease_expires_at AS runnable_since, queue_key AS c_key
        FROM tasks
        WHERE $7
          AND lease_owner IS NOT NULL
          AND status IN ('working', 'input_required')
          AND lease_expires_at <= now()
          AND attempt < max_attempts
          AND cancel_requested_at IS NULL
          AND (expires_at IS NULL OR expires_at > now())
          AND (cardinality($6::text[]) = 0 OR tool = ANY($6::text[]))
        -- A plain index scan of tasks_leased, as rescue's (see there).
        ORDER BY id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    queued AS MATERIALIZED (
        SELECT ctid, id, false, run_after, queue_key
        FROM tasks
        WHERE status = 'working'
          AND lease_owner IS NULL
          AND run_after <= now()
          AND cancel_requested_at IS NULL
          AND (expires_at IS NULL OR expires_at > now())
          AND (cardinality($6::text[]) = 0 OR tool = ANY($6::text[]))
        ORDER BY ",
            $order,
            r"
        LIMIT $2 - (SELECT count(*) FROM lapsed)
        FOR UPDATE SKIP LOCKED
    ),
    candidates AS MATERIALIZED (SELECT * FROM lapsed UNION ALL SELECT * FROM queued),"
        )
    };
}

/// The claim without limits. Built at run time, not checked by `query_as!`: its row
/// flattens a `TaskRow`, which the macros cannot fill. Public to the benchmarks (the
/// `testing` feature), which issue it raw beside [`OLDEST_FIRST_CLAIM`].
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub const CLAIM: &str = concat!(claim_head!("queue_key"), claim_tail!());

/// The claim as it was before fair scheduling: the queue oldest first across everyone
/// (on `tasks_queued`), and no clock. What `mcp-tasks bench fairness` compares the fair
/// claim with; same parameters and rows.
#[cfg(feature = "testing")]
pub const OLDEST_FIRST_CLAIM: &str = concat!(claim_head!("run_after"), update_tail!());

/// The limit keys a task of (tool, tenant, principal) counts against, as rows
/// (kind, a, b), for a `CROSS JOIN LATERAL` after a `LEFT JOIN tool_groups g`: every
/// key, limited or not (`max_of` tells which are).
macro_rules! keys_of {
    ($row:literal) => {
        concat!(
            "(VALUES ('tool', ",
            $row,
            ".tool, ''), ('group', g.grp, ''), ('tenant', ",
            $row,
            ".tenant, ''), ('owner', ",
            $row,
            ".tenant, ",
            $row,
            ".principal)) AS k(kind, a, b)"
        )
    };
}

/// The most running tasks a key allows (NULL: no limit).
macro_rules! max_of {
    ($kind:literal, $a:literal) => {
        concat!(
            "CASE ",
            $kind,
            " WHEN 'tool' THEN (SELECT c.max FROM conc c WHERE c.kind = 'tool' AND c.name = ",
            $a,
            ") WHEN 'group' THEN (SELECT c.max FROM conc c WHERE c.kind = 'group' AND c.name = ",
            $a,
            ") WHEN 'tenant' THEN coalesce((SELECT t.max FROM tenant_max t WHERE t.tenant = ",
            $a,
            "), $15) WHEN 'owner' THEN $16 END"
        )
    };
}

/// What a row of `tasks` in a scan must not match: a key at its limit (or out of
/// tokens).
macro_rules! not_blocked {
    () => {
        "NOT EXISTS (SELECT 1 FROM blocked x WHERE
            (x.kind = 'tool' AND x.a = tasks.tool)
            OR (x.kind = 'group' AND x.a = (SELECT grp FROM tool_groups WHERE tool = tasks.tool))
            OR (x.kind = 'tenant' AND x.a = tasks.tenant)
            OR (x.kind = 'owner' AND x.a = tasks.tenant AND x.b = tasks.principal))"
    };
}

/// The claim with limits (after the advisory lock; see the module). $8..$10: the
/// concurrency limits of tools and groups (kind, name, max); $11, $12: each tool's group;
/// $13, $14: tenants' limits; $15: any other tenant's; $16: any principal's; $17..$20:
/// rates (kind, name, per second, burst).
const CLAIM_LIMITED: &str = concat!(
    r"
    WITH conc AS (SELECT * FROM unnest($8::text[], $9::text[], $10::int4[]) AS x(kind, name, max)),
    tool_groups AS (SELECT * FROM unnest($11::text[], $12::text[]) AS x(tool, grp)),
    tenant_max AS (SELECT * FROM unnest($13::text[], $14::int4[]) AS x(tenant, max)),
    rates AS (
        SELECT * FROM unnest($17::text[], $18::text[], $19::float8[], $20::float8[])
            AS x(kind, name, per_second, burst)
    ),
    -- What runs now, by key: live leases (a lapsed one frees its slot), a handful per
    -- worker, read through tasks_leased.
    running AS MATERIALIZED (
        SELECT k.kind, k.a, k.b, count(*) AS n
        FROM tasks r LEFT JOIN tool_groups g ON g.tool = r.tool
        CROSS JOIN LATERAL ",
    keys_of!("r"),
    r"
        WHERE r.lease_owner IS NOT NULL AND r.lease_expires_at > now() AND k.a IS NOT NULL
        GROUP BY k.kind, k.a, k.b
    ),
    -- The tokens each rate-limited key has now.
    avail AS MATERIALIZED (
        SELECT r.kind, r.name, least(r.burst, coalesce(
            b.tokens + r.per_second * EXTRACT(EPOCH FROM now() - b.at), r.burst)) AS tokens
        FROM rates r LEFT JOIN rate_buckets b ON b.kind = r.kind AND b.name = r.name
    ),
    -- Keys with no room at all: their tasks are left out of the scans below, so that a
    -- backlog held back does not fill the batch.
    blocked AS MATERIALIZED (
        SELECT kind, a, b FROM running WHERE n >= ",
    max_of!("kind", "a"),
    r"
        UNION ALL SELECT kind, name, '' FROM avail WHERE tokens < 1
    ),
    lapsed AS MATERIALIZED (
        SELECT ctid AS c_ctid, id AS c_id, true AS reclaimed,
            lease_expires_at AS runnable_since, queue_key AS c_key, tool, tenant, principal
        FROM tasks
        WHERE $7
          AND lease_owner IS NOT NULL
          AND status IN ('working', 'input_required')
          AND lease_expires_at <= now()
          AND attempt < max_attempts
          AND cancel_requested_at IS NULL
          AND (expires_at IS NULL OR expires_at > now())
          AND (cardinality($6::text[]) = 0 OR tool = ANY($6::text[]))
          AND ",
    not_blocked!(),
    r"
        ORDER BY id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    -- Room to spare: keys with some room left may still turn some of these away.
    queued AS MATERIALIZED (
        SELECT ctid, id, false, run_after, queue_key, tool, tenant, principal
        FROM tasks
        WHERE status = 'working'
          AND lease_owner IS NULL
          AND run_after <= now()
          AND cancel_requested_at IS NULL
          AND (expires_at IS NULL OR expires_at > now())
          AND (cardinality($6::text[]) = 0 OR tool = ANY($6::text[]))
          AND ",
    not_blocked!(),
    r"
        ORDER BY queue_key
        LIMIT 4 * $2 - (SELECT count(*) FROM lapsed)
        FOR UPDATE SKIP LOCKED
    ),
    pool AS MATERIALIZED (SELECT * FROM lapsed UNION ALL SELECT * FROM queued),
    -- Each task's keys, ranked among the pool in claim order: a task fits a key when what
    -- runs under it plus the pool's tasks before it and itself stay within its limit,
    -- and within its tokens. (A task turned away by one key still counts for its other
    -- keys: the batch may admit less than there is room for, never more.)
    keyed AS MATERIALIZED (
        SELECT p.c_id, k.kind, k.a, k.b, ",
    max_of!("k.kind", "k.a"),
    r" AS max,
            row_number() OVER (PARTITION BY k.kind, k.a, k.b ORDER BY p.c_key, p.c_id) AS rank
        FROM pool p LEFT JOIN tool_groups g ON g.tool = p.tool
        CROSS JOIN LATERAL ",
    keys_of!("p"),
    r"
        WHERE k.a IS NOT NULL
    ),
    fits AS (
        SELECT k.c_id
        FROM keyed k
        LEFT JOIN running r ON r.kind = k.kind AND r.a = k.a AND r.b = k.b
        LEFT JOIN avail av ON av.kind = k.kind AND av.name = k.a
        GROUP BY k.c_id
        HAVING bool_and(
            (k.max IS NULL OR coalesce(r.n, 0) + k.rank <= k.max)
            AND (av.tokens IS NULL OR k.rank <= floor(av.tokens)))
    ),
    candidates AS MATERIALIZED (
        SELECT p.* FROM pool p JOIN fits f ON f.c_id = p.c_id
        ORDER BY p.c_key
        LIMIT $2
    ),
    -- The tokens the admitted tasks spend.
    spent AS (
        INSERT INTO rate_buckets AS b (kind, name, tokens, at)
        SELECT av.kind, av.name, av.tokens - u.used, now()
        FROM avail av JOIN (
            SELECT k.kind, k.a, count(*) AS used
            FROM candidates c JOIN keyed k ON k.c_id = c.c_id
            GROUP BY k.kind, k.a
        ) u ON u.kind = av.kind AND u.a = av.name
        ON CONFLICT (kind, name) DO UPDATE SET tokens = EXCLUDED.tokens, at = EXCLUDED.at
    ),",
    claim_tail!()
);
