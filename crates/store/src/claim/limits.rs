//! The claims with limits (see the parent module), and the count of what the limits
//! hold back now, from the same fragments.

use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;

use super::{ClaimLimits, count};
use crate::sql::task_columns;
use crate::{DbResult, Result};

/// `limits` as the limited statements' parameters `$7` to `$19` (see [`limited_head`]).
pub(super) struct LimitArgs<'a> {
    conc_kinds: Vec<&'static str>,
    conc_names: Vec<&'a str>,
    conc_max: Vec<i32>,
    group_tools: Vec<&'a str>,
    groups: Vec<&'a str>,
    tenants: Vec<&'a str>,
    tenant_max: Vec<i32>,
    tenant_default: Option<i32>,
    principal_default: Option<i32>,
    rate_kinds: Vec<&'static str>,
    rate_names: Vec<&'a str>,
    per_second: Vec<f64>,
    burst: Vec<f64>,
}

impl<'a> LimitArgs<'a> {
    pub(super) fn of(limits: &'a ClaimLimits) -> Self {
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
        let (conc_kinds, conc_names, conc_max) = conc
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
        let mut args = Self {
            conc_kinds,
            conc_names,
            conc_max,
            group_tools: limits.tool_groups.keys().map(String::as_str).collect(),
            groups: limits.tool_groups.values().map(String::as_str).collect(),
            tenants: limits.tenants.keys().map(String::as_str).collect(),
            tenant_max: limits.tenants.values().map(|m| count(*m)).collect(),
            tenant_default: limits.tenant_default.map(count),
            principal_default: limits.principal_default.map(count),
            rate_kinds: Vec::new(),
            rate_names: Vec::new(),
            per_second: Vec::new(),
            burst: Vec::new(),
        };
        for (kind, name, rate) in rates {
            args.rate_kinds.push(kind);
            args.rate_names.push(name.as_str());
            args.per_second.push(rate.per_second);
            args.burst.push(rate.burst.max(1.0));
        }
        args
    }

    /// `query` (its `$1` to `$6` bound) with these as `$7` to `$19`.
    pub(super) fn bind<O>(
        self,
        query: QueryAs<'a, Postgres, O, PgArguments>,
    ) -> QueryAs<'a, Postgres, O, PgArguments> {
        query
            .bind(self.conc_kinds)
            .bind(self.conc_names)
            .bind(self.conc_max)
            .bind(self.group_tools)
            .bind(self.groups)
            .bind(self.tenants)
            .bind(self.tenant_max)
            .bind(self.tenant_default)
            .bind(self.principal_default)
            .bind(self.rate_kinds)
            .bind(self.rate_names)
            .bind(self.per_second)
            .bind(self.burst)
    }
}

/// Queued tasks a limit holds back now (see
/// [`SharedStore::held_back`](crate::SharedStore::held_back)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBack {
    /// Which limit: `tool`, `upstream`, `tenant` or `principal` (running at once), or
    /// `tool_rate` or `upstream_rate` (starts per second).
    pub limit: String,
    /// The tool, upstream or tenant the file names; `*` for the limit of any tenant or
    /// principal that the file does not name.
    pub name: String,
    pub tasks: i64,
}

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
            "), $14) WHEN 'owner' THEN $15 END"
        )
    };
}

/// What a row of `tasks` in a scan must not match: a key at its limit (or out of
/// tokens).
macro_rules! not_blocked {
    () => {
        " AND NOT EXISTS (SELECT 1 FROM blocked x WHERE
            (x.kind = 'tool' AND x.a = tasks.tool)
            OR (x.kind = 'group' AND x.a = (SELECT grp FROM tool_groups WHERE tool = tasks.tool))
            OR (x.kind = 'tenant' AND x.a = tasks.tenant)
            OR (x.kind = 'owner' AND x.a = tasks.tenant AND x.b = tasks.principal))"
    };
}

/// The limited claim's candidate columns, with what its keys are made of.
macro_rules! pool_columns {
    () => {
        concat!(candidate_columns!(), ", tool, tenant, principal")
    };
}

/// The limited claims' start, up to the counts of what runs and the keys with no room.
/// $7..$9: the concurrency limits of tools and groups (kind, name, max); $10, $11: each
/// tool's group; $12, $13: tenants' limits; $14: any other tenant's; $15: any principal's;
/// $16..$19: rates (kind, name, per second, burst).
macro_rules! limited_head {
    () => {
        concat!(
            r"
    WITH conc AS (SELECT * FROM unnest($7::text[], $8::text[], $9::int4[]) AS x(kind, name, max)),
    tool_groups AS (SELECT * FROM unnest($10::text[], $11::text[]) AS x(tool, grp)),
    tenant_max AS (SELECT * FROM unnest($12::text[], $13::int4[]) AS x(tenant, max)),
    rates AS (
        SELECT * FROM unnest($16::text[], $17::text[], $18::float8[], $19::float8[])
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
    ),"
        )
    };
}

/// The limited claims' end, after `pool` (of [`pool_columns`]): room to spare (`4 * $2`
/// rows) from which the keys with some room left may still turn some away.
macro_rules! limited_tail {
    () => {
        concat!(
            r"
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
        LIMIT (SELECT $2::int8)
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
        )
    };
}

/// The claim with limits (after the advisory lock; see the module), any tool.
pub(super) const CLAIM_LIMITED: &str = concat!(
    limited_head!(),
    queue_any_tool!(
        "pool",
        pool_columns!(),
        not_blocked!(),
        "(SELECT 4 * $2::int8)"
    ),
    limited_tail!()
);

/// The claim with limits of the tools `$6` only. A tool or group at its limit is left
/// out before its queue is read; a tenant or principal at its limit is passed over within
/// each tool's queue.
pub(super) const CLAIM_LIMITED_BY_TOOL: &str = concat!(
    limited_head!(),
    queue_by_tool!(
        "pool",
        pool_columns!(),
        "(SELECT u.tool FROM unnest($6::text[]) AS u(tool)
          WHERE NOT EXISTS (SELECT 1 FROM blocked x WHERE
              (x.kind = 'tool' AND x.a = u.tool)
              OR (x.kind = 'group' AND x.a = (SELECT grp FROM tool_groups WHERE tool = u.tool)))
         ) AS f",
        not_blocked!(),
        "(SELECT 4 * $2::int8)"
    ),
    limited_tail!()
);

/// Queued tasks held back by each limit that is reached now, of at most `$20` queued
/// tasks (oldest first, through `tasks_queued`), of tenant `$21` and principal `$22`
/// when set. A task held back by two limits counts under each. `$1` to `$6` are the
/// claim's (unused here), so that the limits are the same parameters as there.
const HELD_BACK: &str = concat!(
    limited_head!(),
    r"
    unused AS (SELECT $1::text, $2::int8, $3::int8, $4::text, $5::text, $6::text[]),
    reached AS (
        SELECT CASE kind WHEN 'group' THEN 'upstream' WHEN 'owner' THEN 'principal'
                   ELSE kind END AS limit_name,
               kind, a, b
        FROM running WHERE n >= ",
    max_of!("kind", "a"),
    r"
        UNION ALL
        SELECT CASE kind WHEN 'group' THEN 'upstream_rate' ELSE 'tool_rate' END, kind, name, ''
        FROM avail WHERE tokens < 1
    ),
    queued AS MATERIALIZED (
        SELECT tool, tenant, principal
        FROM tasks
        WHERE status = 'working' AND lease_owner IS NULL AND run_after <= now()
          AND ($21::text IS NULL OR tenant = $21) AND ($22::text IS NULL OR principal = $22)
        ORDER BY run_after
        LIMIT $20
    )
    SELECT r.limit_name,
           CASE WHEN r.kind = 'owner' THEN '*'
                WHEN r.kind = 'tenant' AND NOT EXISTS (
                    SELECT 1 FROM tenant_max t WHERE t.tenant = r.a) THEN '*'
                ELSE r.a END AS name,
           count(*) AS tasks
    FROM reached r JOIN queued q ON
        (r.kind = 'tool' AND q.tool = r.a)
        OR (r.kind = 'group' AND r.a = (SELECT grp FROM tool_groups WHERE tool = q.tool))
        OR (r.kind = 'tenant' AND q.tenant = r.a)
        OR (r.kind = 'owner' AND q.tenant = r.a AND q.principal = r.b)
    GROUP BY 1, 2
    ORDER BY 1, 2"
);

impl crate::Db {
    /// See [`HELD_BACK`].
    pub(crate) async fn held_back(
        &self,
        limits: &ClaimLimits,
        cap: i64,
        tenant: Option<&str>,
        principal: Option<&str>,
    ) -> Result<Vec<HeldBack>> {
        if limits.is_empty() {
            return Ok(Vec::new());
        }
        let args = LimitArgs::of(limits);
        let count = sqlx::query_as(HELD_BACK)
            .bind("")
            .bind(0_i64)
            .bind(0_i64)
            .bind("")
            .bind("")
            .bind(Vec::<String>::new());
        let rows: Vec<(String, String, i64)> = args
            .bind(count)
            .bind(cap)
            .bind(tenant)
            .bind(principal)
            .fetch_all(self.pool())
            .await
            .db()?;
        Ok(rows
            .into_iter()
            .map(|(limit, name, tasks)| HeldBack { limit, name, tasks })
            .collect())
    }
}
