//! The metric names: a public contract (the dashboard in `deploy/observability` and the
//! alert rules use them, and `tests/metrics_contract.rs` checks that they use no other).

/// What kind of Prometheus series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

pub const HTTP_REQUESTS: &str = "mcp_tasks_http_requests_total";
pub const HTTP_REQUEST_DURATION: &str = "mcp_tasks_http_request_duration_seconds";
pub const TASKS: &str = "mcp_tasks_tasks";
pub const QUEUE_DEPTH: &str = "mcp_tasks_queue_depth";
pub const QUEUE_OLDEST_AGE: &str = "mcp_tasks_queue_oldest_age_seconds";
pub const PICKUP_DELAY: &str = "mcp_tasks_pickup_delay_seconds";
pub const TASK_DURATION: &str = "mcp_tasks_task_duration_seconds";
pub const LEASE_LAPSES: &str = "mcp_tasks_lease_lapses_total";
pub const RECLAIMS: &str = "mcp_tasks_reclaims_total";
pub const CLAIM_STATEMENTS: &str = "mcp_tasks_claim_statements_total";
pub const CRASH_RECOVERY: &str = "mcp_tasks_crash_recovery_total";
pub const LISTEN_STREAMS: &str = "mcp_tasks_listen_streams";
pub const NOTIFICATION_LAG: &str = "mcp_tasks_notification_lag_seconds";
pub const DB_POOL_CONNECTIONS: &str = "mcp_tasks_db_pool_connections";
pub const TENANT_QUEUE_DEPTH: &str = "mcp_tasks_tenant_queue_depth";
pub const TENANT_QUEUE_OLDEST_AGE: &str = "mcp_tasks_tenant_queue_oldest_age_seconds";
pub const HELD_BACK: &str = "mcp_tasks_held_back";

/// Families written by the scrape itself rather than kept in the registry (`prom.rs`):
/// their label sets change from one sample to the next (the deepest tenants now, the
/// limits reached now), and a series that left must leave the exposition too.
pub const SAMPLED_FAMILIES: &[&str] = &[TENANT_QUEUE_DEPTH, TENANT_QUEUE_OLDEST_AGE, HELD_BACK];

/// How many tenants get a series of their own in the per-tenant families; the rest are
/// summed (depth) or maxed (age) into `tenant="other"`.
pub const TOP_TENANTS: usize = 10;

/// Every metric the service exports: name, kind, labels, help text.
pub const ALL: &[(&str, Kind, &[&str], &str)] = &[
    (
        HTTP_REQUESTS,
        Kind::Counter,
        &["method", "outcome"],
        "MCP requests answered, by JSON-RPC method and outcome (ok, error, unavailable)",
    ),
    (
        HTTP_REQUEST_DURATION,
        Kind::Histogram,
        &["method"],
        "Time from a request's head to its answer's head, by JSON-RPC method",
    ),
    (
        TASKS,
        Kind::Gauge,
        &["status"],
        "Tasks by status: exact for working and input_required, the planner's estimate for finished ones",
    ),
    (
        QUEUE_DEPTH,
        Kind::Gauge,
        &[],
        "Tasks a worker could claim now",
    ),
    (
        QUEUE_OLDEST_AGE,
        Kind::Gauge,
        &[],
        "How long the oldest claimable task has been claimable (0 when none is)",
    ),
    (
        PICKUP_DELAY,
        Kind::Histogram,
        &[],
        "Time from a task becoming runnable to a worker claiming it",
    ),
    (
        TASK_DURATION,
        Kind::Histogram,
        &["tool", "outcome"],
        "One run of a task on a worker, by tool and outcome",
    ),
    (
        LEASE_LAPSES,
        Kind::Counter,
        &[],
        "Runs stopped because their lease was lost",
    ),
    (
        RECLAIMS,
        Kind::Counter,
        &[],
        "Claims of tasks whose previous worker's lease lapsed",
    ),
    (
        CLAIM_STATEMENTS,
        Kind::Counter,
        &["cause"],
        "Claim statements a worker ran, by what made it look: start, backlog (slots came free while work was queued), notified, poll",
    ),
    (
        CRASH_RECOVERY,
        Kind::Counter,
        &[],
        "Tasks failed with CRASH_RECOVERY after every attempt was lost",
    ),
    (
        LISTEN_STREAMS,
        Kind::Gauge,
        &[],
        "subscriptions/listen streams open on this replica",
    ),
    (
        NOTIFICATION_LAG,
        Kind::Histogram,
        &[],
        "Time from a task change's commit to the push hub's read of it",
    ),
    (
        DB_POOL_CONNECTIONS,
        Kind::Gauge,
        &["state"],
        "Database pool connections: active, idle, max",
    ),
    (
        TENANT_QUEUE_DEPTH,
        Kind::Gauge,
        &["tenant"],
        "Claimable tasks per tenant: the 10 deepest tenants, and the rest together as tenant=\"other\"",
    ),
    (
        TENANT_QUEUE_OLDEST_AGE,
        Kind::Gauge,
        &["tenant"],
        "How long each tenant's oldest claimable task has waited (the same tenants; \"other\": the oldest of the rest)",
    ),
    (
        HELD_BACK,
        Kind::Gauge,
        &["limit", "name"],
        "Claimable tasks a reached limit holds back: limit tool, upstream, tenant, principal (running at once), tool_rate, upstream_rate; name the tool, upstream or tenant, * for any tenant or principal",
    ),
];

/// The names a Prometheus query may use for a metric: the metric itself, and for a
/// histogram its `_bucket`, `_sum` and `_count` series.
pub fn series_names() -> Vec<String> {
    let mut names = Vec::new();
    for (name, kind, _, _) in ALL {
        names.push((*name).to_owned());
        if *kind == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.push(format!("{name}{suffix}"));
            }
        }
    }
    names
}

/// JSON-RPC methods that get a label of their own; anything else a client sends is
/// `other`, so a client cannot grow the label set.
pub const METHODS: &[&str] = &[
    "server/discover",
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
    "subscriptions/listen",
    "logging/setLevel",
];

/// The `method` label for a JSON-RPC method name.
pub fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}
