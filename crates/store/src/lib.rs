//! The PostgreSQL task store. This crate alone writes SQL.
//!
//! Conventions:
//! - Every client-facing statement is keyed by [`Owner`] *and* task id. A task of another
//!   owner is never read, so it cannot be told apart from a task that does not exist.
//! - Every worker-side write names the lease token it holds and the state it expects;
//!   zero rows affected means the worker has lost the task and must drop its work.
//! - Not found is a value ([`Lookup`]), not an error; errors are database failures.
//! - LISTEN/NOTIFY is the store's too: statements notify, and [`SharedStore::events`]
//!   hands out what they said as typed [`Event`]s, on a connection the stream keeps alive
//!   itself. Payloads are read in one place (`events.rs`).
//! - Each role has its own handle; [`Store`] owns the connections and hands them out. A
//!   replica cannot call a fenced write, nor a worker read a principal's list: those
//!   methods are not on their handles (see the examples on [`ReplicaStore`] and
//!   [`WorkerStore`]).
//! - Fixed statements are checked at compile time (`sqlx::query!` and its kin, against the
//!   offline data in the workspace's `.sqlx/`); the few built or chosen at run time say why
//!   where they are (`tests/checks/sqlx-offline` keeps that list).
//! - Nothing of sqlx shows in the public API (`tests/checks/store-surface` checks it), so
//!   only this crate depends on it.
//!
//! ## Roles
//!
//! [`Store`] owns the connections; each process takes only the handles of what it does,
//! so what it must never do is not a method it can call:
//!
//! | handle | who | what |
//! |---|---|---|
//! | [`ReplicaStore`] | replicas, for clients | create, read (`tasks/get`, the 2025-era `tasks/list`), answer input, cancel; the push hub's watch marks and batched reads; the readiness ping; the worker [`Waker`] |
//! | [`WorkerStore`] | workers | claim, heartbeat, the fenced writes of a run (status, checkpoint, input, finish, release), rescue, maintenance, the `workers` table, the wake-up duty |
//! | [`ConsoleReads`] | the web console | its lists, counts, inbox, health, history and plans, a tenant admin's read of a task, the workers seen |
//! | [`Sessions`] | replicas | 2025-era session revocations and the console's refresh turns |
//! | [`SharedStore`] | every process | the LISTEN stream ([`SharedStore::events`]) and the figures metrics sample |
//!
//! The console's own writes (cancel, answers) go through the replica's API, as a client's
//! do. [`SharedStore`] grants no write, so every role handle hands one out (`shared()`):
//! both replicas and workers listen, and both are scraped for metrics.

mod batch;
mod budget;
mod claim;
mod client_ops;
mod console;
mod create;
mod duty;
mod events;
mod finish;
mod held_input;
mod lanes;
mod leader;
mod lease;
mod listing;
mod maintenance;
mod notify;
mod primary;
mod queue;
mod record;
mod refreshes;
mod roles;
mod sessions;
mod sql;
mod stats;
mod storable;
mod tenant_read;
#[cfg(feature = "testing")]
pub mod testing;
mod views;
mod watch;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_wire::secret::Secret;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, migrate::Migrator};

pub use budget::ConnectionBudget;
pub use claim::{ClaimLimits, Claimed, HeldBack, Rate};
pub use client_ops::{CancelOutcome, InputValidationError, UpdateOutcome};
pub use console::{
    COUNT_LIMIT, HISTORY_LIMIT, Health, HistoryEvent, HistoryKind, LapseCounts, PercentileBucket,
    QUEUE_COUNT_LIMIT, QueryPlan, RUNNING_LIMIT, RunningTask, SAMPLES_PER_BUCKET, SCAN_LIMIT,
    Scope, StatusCount, TaskFilter, TaskPage, TaskSummary, WorkerLoad,
};
pub use create::{Created, Idempotency, MAX_CREATE_BATCH, NewTask, Placement};
pub use duty::{DUTY_APPLICATION_NAME, DUTY_WAIT_ROUND, Duty, duty_key};
pub use events::{Event, EventKind, Events, EventsConfig};
pub use held_input::{HeldAnswers, HeldAsk};
pub use lease::{Finish, HeartbeatReply, InputOutcome, RescueReport};
pub use listing::ListCursor;
pub use maintenance::{ANALYZE_LOCK, MaintenanceReport};
pub use notify::{LISTENER_APPLICATION_NAME, Tenants, Waker};
pub use record::{Lease, TaskId, TaskRecord};
pub use refreshes::RefreshTurn;
pub use roles::{ConsoleReads, ReplicaStore, Sessions, SharedStore, WorkerStore};
pub use sessions::Revocation;
pub use stats::{PoolStats, TaskStats, TenantQueue};
pub use storable::MAX_RESULT_BYTES;
pub use workers::{
    FORGET_WORKERS_AFTER, MISSED_REFRESHES, WORKERS_LIMIT, WorkerInfo, WorkerPresence,
};

/// Most history events (`task_events`) one task keeps, its newest: deletion takes a
/// task's events with it, but a task without a TTL is never deleted, and one asking for
/// input again and again would add events for ever. The bound is kept by a trigger
/// (migration `20261229000001_task_events_bound.sql`), and is no more than the console
/// reads of a task ([`HISTORY_LIMIT`]).
pub const EVENTS_PER_TASK: i64 = 500;
const _: () = assert!(EVENTS_PER_TASK <= HISTORY_LIMIT);

/// Migrations, embedded from the workspace's `migrations/` folder.
static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// The versions of the embedded migrations, in the order they are applied.
pub fn migration_versions() -> Vec<i64> {
    MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version)
        .collect()
}

/// Who owns a task. Every client-facing query is scoped by both parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub tenant: String,
    pub principal: String,
}

impl Owner {
    pub fn new(tenant: impl Into<String>, principal: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            principal: principal.into(),
        }
    }
}

/// The result of looking up a task for its owner.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Found(T),
    /// The owner had this task, and it was deleted after it expired.
    Expired,
    /// No task of this owner has this id (it may exist under another owner).
    NotFound,
}

/// A database failure, or a stored task the store cannot read. The cause is the store's
/// business; callers ask [`StoreError::is_unavailable`] to tell "try again later" from an
/// internal error, and print it for the log.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(Repr);

#[derive(Debug, thiserror::Error)]
enum Repr {
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("stored task is inconsistent: {0}")]
    Corrupt(String),
    /// The failure of a batch, which each of its requests reports.
    #[error(transparent)]
    Shared(Arc<StoreError>),
    /// A request the store will not send, and why (see `storable.rs`).
    #[error("{0}")]
    Refused(String),
}

impl StoreError {
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Self(Repr::Corrupt(what.into()))
    }

    pub(crate) fn shared(error: Arc<StoreError>) -> Self {
        Self(Repr::Shared(error))
    }

    pub(crate) fn refused(why: impl Into<String>) -> Self {
        Self(Repr::Refused(why.into()))
    }

    /// Why the request was refused before it reached the database, when it was: the
    /// request's own fault (a string with U+0000, which PostgreSQL cannot store), to be
    /// answered as invalid params with this text, not as an internal error.
    pub fn refusal(&self) -> Option<&str> {
        match &self.0 {
            Repr::Refused(why) => Some(why),
            Repr::Shared(e) => e.refusal(),
            _ => None,
        }
    }

    /// True when the database could not be reached at all (as opposed to a query that
    /// failed), so callers can answer "try again later" rather than "internal error".
    pub fn is_unavailable(&self) -> bool {
        match &self.0 {
            Repr::Shared(e) => e.is_unavailable(),
            Repr::Database(e) => unreachable(e),
            // The migrator's statements, and its lock, failing the same ways.
            Repr::Migrate(
                sqlx::migrate::MigrateError::Execute(e)
                | sqlx::migrate::MigrateError::ExecuteMigration(e, _),
            ) => unreachable(e),
            _ => false,
        }
    }
}

/// The database could not be reached (as opposed to a statement that failed).
fn unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        // Connection exceptions (08), too many connections (53300), the server shutting
        // down, restarting or not accepting yet (57P01..57P03), and a write refused by a
        // read-only server (25006: a demoted primary, or a standby a pooler or proxy
        // still leads to). Nothing was written, and the primary is a retry away.
        sqlx::Error::Database(e) => e.code().is_some_and(|code| {
            code.starts_with("08")
                || matches!(
                    code.as_ref(),
                    "25006" | "53300" | "57P01" | "57P02" | "57P03"
                )
        }),
        _ => false,
    }
}

/// `?` for sqlx results inside the store: no `From<sqlx::Error>` on the public error, so
/// no sqlx type in the store's API.
pub(crate) trait DbResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> DbResult<T> for std::result::Result<T, sqlx::Error> {
    fn db(self) -> Result<T> {
        self.map_err(|e| {
            primary::saw(&e);
            StoreError(Repr::Database(e))
        })
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Pool settings. The defaults suit one replica or worker process.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub max_connections: u32,
    /// How long a request waits for a connection before the database counts as down.
    pub acquire_timeout: Duration,
    /// Server-side cap on any one statement, so nothing blocks forever.
    pub statement_timeout: Duration,
    /// Server-side cap on waiting for a lock: a row another transaction holds fails the
    /// statement (to be retried) instead of stalling it and the connection.
    pub lock_timeout: Duration,
    /// Server-side cap on a transaction left open and idle (a stuck client), which would
    /// hold its row locks and keep vacuum from cleaning up.
    pub idle_in_transaction_timeout: Duration,
    /// Set when the store's URL is a pooler in transaction mode (PgBouncer 1.21 or later,
    /// which carries prepared statements across its server connections): a URL straight
    /// to PostgreSQL for what needs a session of its own (LISTEN, the wake-up duty's lock,
    /// migrations). Pooled connections then send no session settings, which PgBouncer
    /// refuses; its `connect_query` sets them (see the README, *Behind a pooler*).
    pub direct_url: Option<Secret>,
}

/// Connections for this machine: enough to keep every core busy while others wait on
/// the network or on commits, not so many that PostgreSQL spends its time switching
/// between them (group commit needs few: a batch is one statement).
pub fn default_max_connections() -> u32 {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    u32::try_from(cores * 4).unwrap_or(u32::MAX).clamp(8, 64)
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_connections: default_max_connections(),
            // Short, so that while the database is down requests fail fast with "retry
            // later" instead of queueing behind connections that cannot be made.
            acquire_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(30),
            direct_url: None,
        }
    }
}

/// The connections to the task store: connects, migrates and closes, and hands out the
/// handle of each role (see `roles.rs`); cheap to clone. Clones share the pools and the
/// batchers. Only the process's wiring (the `mcp-tasks` binary, the harnesses) holds one.
#[derive(Clone)]
pub struct Store {
    db: Db,
}

/// What every handle shares: the pools and the batchers.
#[derive(Clone)]
pub(crate) struct Db {
    pool: PgPool,
    /// One connection of its own for readiness probes, outside `pool`: when client
    /// requests hold every pooled connection, `/readyz` still answers from the database
    /// itself instead of queueing behind them (and the balancer keeps the replica).
    probe: PgPool,
    batchers: Arc<Batchers>,
    /// Behind a pooler in transaction mode, where connections of their own go
    /// ([`PoolConfig::direct_url`]).
    session: Option<primary::SessionTarget>,
    /// With several hosts, what keeps the pools on the writable one.
    _watches: Arc<Vec<primary::Watch>>,
}

struct Batchers {
    creates: Arc<batch::Batcher<create::CreateRequest, create::CreateAnswer>>,
    finishes: Arc<batch::Batcher<finish::FinishRequest, bool>>,
    views: Arc<batch::Batcher<views::ViewRequest, Option<record::ViewRow>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("pool", &self.db.pool)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Pools for `database_url`: one host, or several (libpq's `h1:p1,h2:p2`), of which
    /// the writable one is used (see `primary.rs`). Connects lazily.
    pub async fn connect(database_url: &str, config: &PoolConfig) -> Result<Self> {
        let targets = primary::targets(database_url).map_err(StoreError::refused)?;
        let millis = |d: Duration| d.as_millis().to_string();
        let with_settings = |options: PgConnectOptions| {
            options.application_name("mcp-tasks").options([
                // Pinned: a database or role default of `off` (set for some other client)
                // would return handles to tasks a crash can still lose.
                ("synchronous_commit", "on".to_owned()),
                // Every statement here is short. Claims keep their generic plan, whose
                // guess of a parameter's LIMIT (a tenth of the queue) puts its cost past
                // `jit_above_cost` once the queue is large: at a million queued tasks each
                // claim then spent some 40 ms compiling itself for a 2 ms run.
                ("jit", "off".to_owned()),
                ("statement_timeout", millis(config.statement_timeout)),
                ("lock_timeout", millis(config.lock_timeout)),
                (
                    "idle_in_transaction_session_timeout",
                    millis(config.idle_in_transaction_timeout),
                ),
            ])
        };
        let pooled: PgConnectOptions = targets.first.parse().db()?;
        let (options, session, direct_hosts) = match &config.direct_url {
            None => (with_settings(pooled), None, Vec::new()),
            Some(direct) => {
                let direct = primary::targets(direct.expose()).map_err(StoreError::refused)?;
                (
                    // PgBouncer refuses a startup `options`: its `connect_query` sets them.
                    pooled.application_name("mcp-tasks"),
                    Some(primary::SessionTarget::new(with_settings(
                        direct.first.parse().db()?,
                    ))),
                    direct.hosts,
                )
            }
        };
        // Both pools use only a writable server, and leave one that may have stopped
        // being the primary at once (see `primary.rs`).
        let pool_options = || {
            PgPoolOptions::new()
                .acquire_timeout(config.acquire_timeout)
                // No ping before every statement (a round trip each): a connection that
                // died with the server fails its statement, which is answered "retry
                // later" and the connection dropped.
                .test_before_acquire(false)
                .after_connect(|connection, _| Box::pin(primary::refuse_read_only(connection)))
                .before_acquire(|_, meta| {
                    Box::pin(async move { Ok(primary::opened_since_change(meta.age)) })
                })
        };
        let probe = pool_options()
            .max_connections(1)
            .connect_lazy_with(options.clone().application_name("mcp-tasks-probe"));
        let pool = pool_options()
            .max_connections(config.max_connections)
            .connect_lazy_with(options);
        // With several hosts, a watch keeps the pools (and, behind a pooler, the direct
        // connections) on the writable one.
        let mut watches = Vec::new();
        if targets.hosts.len() > 1 {
            let pools = vec![pool.clone(), probe.clone()];
            watches.push(primary::Watch::start(targets.hosts, pools, None));
        }
        if let Some(session) = session.as_ref().filter(|_| direct_hosts.len() > 1) {
            let probe = pool_options()
                .max_connections(1)
                .connect_lazy_with(session.options().application_name("mcp-tasks-probe"));
            let watch = primary::Watch::start(direct_hosts, vec![probe], Some(session.clone()));
            watches.push(watch);
        }
        let batchers = Arc::new(Batchers {
            creates: batch::Batcher::new(
                pool.clone(),
                batch::Kind {
                    exec: create::insert_batch,
                    max: create::MAX_CREATE_BATCH,
                    max_bytes: storable::MAX_BATCH_BYTES,
                    // Nobody would get the handle of a task created for a caller gone.
                    skip_abandoned: true,
                    // One after another, so the in-flight limit stays exact.
                    retry_at_once: 1,
                    linger: true,
                },
            ),
            finishes: batch::Batcher::new(
                pool.clone(),
                batch::Kind {
                    exec: finish::finish_batch,
                    max: 256,
                    max_bytes: storable::MAX_BATCH_BYTES,
                    // A run's outcome is written even if its worker stopped waiting.
                    skip_abandoned: false,
                    // A few at once: one stuck behind a locked row holds up no others.
                    retry_at_once: 4,
                    linger: true,
                },
            ),
            views: batch::Batcher::new(
                pool.clone(),
                batch::Kind {
                    exec: views::read_batch,
                    max: views::MAX_VIEW_BATCH,
                    // Rows are read, not written: what a batch answers is bounded by
                    // its count times the largest stored result.
                    max_bytes: usize::MAX,
                    // Nobody would read the answer.
                    skip_abandoned: true,
                    retry_at_once: 4,
                    linger: false,
                },
            ),
        });
        Ok(Self {
            db: Db {
                pool,
                probe,
                batchers,
                session,
                _watches: Arc::new(watches),
            },
        })
    }

    /// Applies pending migrations. sqlx holds a PostgreSQL advisory lock for the whole
    /// run, so several replicas may call this at once: one migrates, the others wait and
    /// then find nothing to do.
    #[tracing::instrument(name = "db.migrate", skip_all, err(level = "debug"))]
    pub async fn migrate(&self) -> Result<()> {
        // sqlx's migration lock is a session's: behind a pooler, on a connection of its
        // own (a pool of one, which the migrator's future can hold across awaits).
        let direct = self.db.session.as_ref().map(|session| {
            PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with(session.options())
        });
        let migrated = MIGRATOR
            .run(direct.as_ref().unwrap_or(self.db.pool()))
            .await;
        if let Some(direct) = direct {
            direct.close().await;
        }
        migrated.map_err(|e| StoreError(Repr::Migrate(e)))?;
        // Not refused: most JSON works in other encodings. But a database made on a
        // server initialised without a locale is SQL_ASCII, where PostgreSQL refuses
        // JSON text with `\u` escapes of non-ASCII characters, so some tool arguments
        // and results would fail to store; say so once, where an operator looks.
        let encoding =
            sqlx::query_scalar!(r#"SELECT current_setting('server_encoding') AS "encoding!""#)
                .fetch_one(self.db.pool())
                .await
                .db()?;
        if encoding != "UTF8" {
            tracing::warn!(
                encoding = %encoding,
                "the database's encoding is not UTF8: JSON with \\u escapes of non-ASCII characters will be refused; create the database with ENCODING 'UTF8'"
            );
        }
        Ok(())
    }

    /// Closes every connection, waiting for those in use to be given back. Every handle
    /// this store handed out is closed with it.
    pub async fn close(&self) {
        self.db.pool.close().await;
        self.db.probe.close().await;
    }
}

impl Db {
    pub(crate) fn creates(&self) -> &batch::Batcher<create::CreateRequest, create::CreateAnswer> {
        &self.batchers.creates
    }

    pub(crate) fn finishes(&self) -> &batch::Batcher<finish::FinishRequest, bool> {
        &self.batchers.finishes
    }

    pub(crate) fn views(&self) -> &batch::Batcher<views::ViewRequest, Option<record::ViewRow>> {
        &self.batchers.views
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn probe(&self) -> &PgPool {
        &self.probe
    }

    /// Where a connection of its own (outside the pools) goes: straight to PostgreSQL
    /// behind a pooler, otherwise where the pool connects now.
    pub(crate) fn session_options(&self) -> PgConnectOptions {
        match &self.session {
            Some(session) => session.options(),
            None => self.pool.connect_options().as_ref().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_failed_and_whether_to_retry() {
        let down = Err::<(), _>(sqlx::Error::PoolTimedOut).db().unwrap_err();
        assert!(down.is_unavailable());
        assert_eq!(
            down.to_string(),
            format!("database error: {}", sqlx::Error::PoolTimedOut)
        );
        assert!(std::error::Error::source(&down).is_some());

        let broken = Err::<(), _>(sqlx::Error::RowNotFound).db().unwrap_err();
        assert!(!broken.is_unavailable());

        let corrupt = StoreError::corrupt("task 1: status");
        assert!(!corrupt.is_unavailable());
        assert_eq!(
            corrupt.to_string(),
            "stored task is inconsistent: task 1: status"
        );
    }
}
