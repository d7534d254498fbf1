//! The PostgreSQL task store. This crate alone writes SQL.
//!
//! Conventions:
//! - Every client-facing statement is keyed by [`Owner`] *and* task id. A task of another
//!   owner is never read, so it cannot be told apart from a task that does not exist.
//! - Every worker-side write names the lease token it holds and the state it expects;
//!   zero rows affected means the worker has lost the task and must drop its work.
//! - Not found is a value ([`Lookup`]), not an error; errors are database failures.

mod client_ops;
mod events;
mod lease;
mod maintenance;
mod notify;
mod record;
mod watch;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, migrate::Migrator};

pub use client_ops::{
    CancelOutcome, Created, Idempotency, InputValidationError, NewTask, UpdateOutcome,
};
pub use events::{Event, EventKind, Events, EventsConfig};
pub use lease::{Claimed, Finish, HeartbeatReply, InputOutcome, Lease, RescueReport};
pub use maintenance::MaintenanceReport;
pub use notify::{LISTENER_APPLICATION_NAME, Waker};
pub use record::{TaskId, TaskRecord};

/// Migrations, embedded from the workspace's `migrations/` folder.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

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

impl<T> Lookup<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Lookup<U> {
        match self {
            Self::Found(t) => Lookup::Found(f(t)),
            Self::Expired => Lookup::Expired,
            Self::NotFound => Lookup::NotFound,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored task is inconsistent: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// True when the database could not be reached at all (as opposed to a query that
    /// failed), so callers can answer "try again later" rather than "internal error".
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Database(
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_),
            ) => true,
            // Connection exceptions (08), too many connections (53300), and the server
            // shutting down, restarting or not accepting yet (57P01..57P03).
            Self::Database(sqlx::Error::Database(e)) => e.code().is_some_and(|code| {
                code.starts_with("08")
                    || matches!(code.as_ref(), "53300" | "57P01" | "57P02" | "57P03")
            }),
            _ => false,
        }
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
        let options: PgConnectOptions = database_url.parse()?;
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

    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations. sqlx holds a PostgreSQL advisory lock for the whole
    /// run, so several replicas may call this at once: one migrates, the others wait and
    /// then find nothing to do.
    #[tracing::instrument(name = "db.migrate", skip_all, err(level = "debug"))]
    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection, waiting for those in use to be given back. Every clone of
    /// this store is closed with it.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Readiness: the database answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
