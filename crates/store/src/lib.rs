//! The PostgreSQL task store. This crate alone writes SQL.
//!
//! Conventions:
//! - Every client-facing statement is keyed by [`Owner`] *and* task id. A task of another
//!   owner is never read, so it cannot be told apart from a task that does not exist.
//! - Every worker-side write names the lease token it holds and the state it expects;
//!   zero rows affected means the worker has lost the task and must drop its work.
//! - Not found is a value ([`Lookup`]), not an error; errors are database failures.
//! - LISTEN/NOTIFY is the store's too: statements notify, and [`Store::events`] hands out
//!   what they said as typed [`Event`]s, on a connection the stream keeps alive itself.
//!   Payloads are read in one place (`events.rs`).
//! - Nothing of sqlx shows in the public API (`tests/checks/store-surface` checks it), so
//!   only this crate depends on it.

mod client_ops;
mod events;
mod lease;
mod listing;
mod maintenance;
mod notify;
mod queue;
mod record;
mod sessions;
mod stats;
mod watch;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, migrate::Migrator};

pub use client_ops::{
    CancelOutcome, Created, Idempotency, InputValidationError, NewTask, UpdateOutcome,
};
pub use events::{Event, EventKind, Events, EventsConfig};
pub use lease::{Claimed, Finish, HeartbeatReply, InputOutcome, Lease, RescueReport};
pub use listing::ListCursor;
pub use maintenance::MaintenanceReport;
pub use notify::{LISTENER_APPLICATION_NAME, Waker};
pub use record::{TaskId, TaskRecord};
pub use sessions::Revocation;
pub use stats::{PoolStats, TaskStats};

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
}

impl StoreError {
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Self(Repr::Corrupt(what.into()))
    }

    /// True when the database could not be reached at all (as opposed to a query that
    /// failed), so callers can answer "try again later" rather than "internal error".
    pub fn is_unavailable(&self) -> bool {
        match &self.0 {
            Repr::Database(
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_),
            ) => true,
            // Connection exceptions (08), too many connections (53300), and the server
            // shutting down, restarting or not accepting yet (57P01..57P03).
            Repr::Database(sqlx::Error::Database(e)) => e.code().is_some_and(|code| {
                code.starts_with("08")
                    || matches!(code.as_ref(), "53300" | "57P01" | "57P02" | "57P03")
            }),
            _ => false,
        }
    }
}

/// `?` for sqlx results inside the store: no `From<sqlx::Error>` on the public error, so
/// no sqlx type in the store's API.
pub(crate) trait DbResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> DbResult<T> for std::result::Result<T, sqlx::Error> {
    fn db(self) -> Result<T> {
        self.map_err(|e| StoreError(Repr::Database(e)))
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
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_connections: 16,
            // Short, so that while the database is down requests fail fast with "retry
            // later" instead of queueing behind connections that cannot be made.
            acquire_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(30),
        }
    }
}

/// A handle on the task store; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    pub async fn connect(database_url: &str, config: &PoolConfig) -> Result<Self> {
        let options: PgConnectOptions = database_url.parse().db()?;
        let options = options.application_name("mcp-tasks").options([(
            "statement_timeout",
            config.statement_timeout.as_millis().to_string(),
        )]);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            // Replaces connections that died with the server instead of handing them out.
            .test_before_acquire(true)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations. sqlx holds a PostgreSQL advisory lock for the whole
    /// run, so several replicas may call this at once: one migrates, the others wait and
    /// then find nothing to do.
    #[tracing::instrument(name = "db.migrate", skip_all, err(level = "debug"))]
    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StoreError(Repr::Migrate(e)))?;
        Ok(())
    }

    /// Closes every connection, waiting for those in use to be given back. Every clone of
    /// this store is closed with it.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The most connections this store's pool opens.
    pub fn max_connections(&self) -> u32 {
        self.pool.options().get_max_connections()
    }

    /// Readiness: the database answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await.db()?;
        Ok(())
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
