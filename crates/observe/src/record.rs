//! What replicas and workers record. Each call is a no-op until a process installs the
//! recorder ([`crate::Metrics::install`]), so libraries and in-process tests pay nothing.

use std::time::Duration;

use crate::names;

/// How an MCP request ended, for `mcp_tasks_http_requests_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result, a stream, or an accepted notification.
    Ok,
    /// A JSON-RPC error (the client's doing: bad params, unknown task, refused, limits).
    Error,
    /// HTTP 5xx: the database was unreachable, a deadline passed, the replica was full.
    Unavailable,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Unavailable => "unavailable",
        }
    }
}

pub fn http_request(method: &'static str, outcome: Outcome, took: Duration) {
    metrics::counter!(names::HTTP_REQUESTS, "method" => method, "outcome" => outcome.as_str())
        .increment(1);
    metrics::histogram!(names::HTTP_REQUEST_DURATION, "method" => method)
        .record(took.as_secs_f64());
}

/// A claim: how long the task had been runnable, and whether its last worker was lost.
pub fn task_claimed(pickup_delay: Duration, reclaimed: bool) {
    metrics::histogram!(names::PICKUP_DELAY).record(pickup_delay.as_secs_f64());
    if reclaimed {
        metrics::counter!(names::RECLAIMS).increment(1);
    }
}

/// One run ended: `outcome` is `completed`, `failed`, `cancelled`, `input_required`,
/// `released` (shutdown) or `lost` (lease gone, nothing recorded).
pub fn task_run(tool: &str, outcome: &'static str, took: Duration) {
    metrics::histogram!(names::TASK_DURATION, "tool" => tool.to_owned(), "outcome" => outcome)
        .record(took.as_secs_f64());
}

/// What made a worker run a claim statement, for `mcp_tasks_claim_statements_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimCause {
    /// The first claim after start.
    Start,
    /// Slots came free while the last claim found more work than it could take.
    Backlog,
    /// A notification of new work (or the wake-up duty) woke the worker.
    Notified,
    /// The backstop poll.
    Poll,
}

impl ClaimCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Backlog => "backlog",
            Self::Notified => "notified",
            Self::Poll => "poll",
        }
    }
}

pub fn claim_statement(cause: ClaimCause) {
    metrics::counter!(names::CLAIM_STATEMENTS, "cause" => cause.as_str()).increment(1);
}

pub fn lease_lapsed() {
    metrics::counter!(names::LEASE_LAPSES).increment(1);
}

pub fn crash_recovered(tasks: u64) {
    metrics::counter!(names::CRASH_RECOVERY).increment(tasks);
}

pub fn listen_streams(open: usize) {
    metrics::gauge!(names::LISTEN_STREAMS).set(open as f64);
}

/// The push hub read a changed task `lag` after the change was committed.
pub fn notification_lag(lag: Duration) {
    metrics::histogram!(names::NOTIFICATION_LAG).record(lag.as_secs_f64());
}
