//! The store's handles, one per role (the crate docs list them), and [`Store`] handing
//! them out. The compile-fail examples on [`ReplicaStore`] and [`WorkerStore`] show what
//! each cannot do.

use crate::{Db, DbResult, Result, Store};

/// What replicas do for clients (see the roles in the [crate] docs).
///
/// It has no fenced write:
///
/// ```compile_fail,E0599
/// async fn finish(replica: &mcp_tasks_store::ReplicaStore, lease: &mcp_tasks_store::Lease) {
///     let _ = replica.finish(lease, &mcp_tasks_store::Finish::Cancelled, None).await;
/// }
/// ```
///
/// ```compile_fail,E0599
/// async fn heartbeat(replica: &mcp_tasks_store::ReplicaStore, leases: &[mcp_tasks_store::Lease]) {
///     let _ = replica.heartbeat(leases, 30_000).await;
/// }
/// ```
///
/// while a worker's has (the same code, on the other handle):
///
/// ```no_run
/// async fn finish(worker: &mcp_tasks_store::WorkerStore, lease: &mcp_tasks_store::Lease) {
///     let _ = worker.finish(lease, &mcp_tasks_store::Finish::Cancelled, None).await;
///     let _ = worker.heartbeat(std::slice::from_ref(lease), 30_000).await;
/// }
/// ```
#[derive(Clone)]
pub struct ReplicaStore {
    pub(crate) db: Db,
}

/// What workers do: claim, run under a fenced lease, maintain (see the roles in the
/// [crate] docs).
///
/// It reads no list, neither the console's nor a client's:
///
/// ```compile_fail,E0599
/// async fn list(worker: &mcp_tasks_store::WorkerStore, scope: &mcp_tasks_store::Scope) {
///     let _ = worker
///         .console_tasks(scope, &Default::default(), None, 50)
///         .await;
/// }
/// ```
///
/// ```compile_fail,E0599
/// async fn list(worker: &mcp_tasks_store::WorkerStore, owner: &mcp_tasks_store::Owner) {
///     let _ = worker.list_tasks(owner, None, 50).await;
/// }
/// ```
///
/// ```no_run
/// async fn list(
///     console: &mcp_tasks_store::ConsoleReads,
///     replica: &mcp_tasks_store::ReplicaStore,
///     scope: &mcp_tasks_store::Scope,
///     owner: &mcp_tasks_store::Owner,
/// ) {
///     let _ = console
///         .console_tasks(scope, &Default::default(), None, 50)
///         .await;
///     let _ = replica.list_tasks(owner, None, 50).await;
/// }
/// ```
#[derive(Clone)]
pub struct WorkerStore {
    pub(crate) db: Db,
}

/// What the web console reads (see the roles in the [crate] docs).
#[derive(Clone)]
pub struct ConsoleReads {
    pub(crate) db: Db,
}

/// 2025-era sessions ended by `DELETE`, and the console's refresh turns (see the roles in
/// the [crate] docs).
#[derive(Clone)]
pub struct Sessions {
    pub(crate) db: Db,
}

/// What every process needs: notifications and the figures of its pool and the tasks (see
/// the roles in the [crate] docs).
#[derive(Clone)]
pub struct SharedStore {
    pub(crate) db: Db,
}

macro_rules! debug_as {
    ($($ty:ident),*) => {$(
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("pool", self.db.pool())
                    .finish_non_exhaustive()
            }
        }
    )*};
}
debug_as!(
    ReplicaStore,
    WorkerStore,
    ConsoleReads,
    Sessions,
    SharedStore
);

impl Store {
    /// The replica's handle: what it does for clients.
    pub fn replica(&self) -> ReplicaStore {
        ReplicaStore {
            db: self.db.clone(),
        }
    }

    /// The worker's handle: claims, fenced writes, maintenance.
    pub fn worker(&self) -> WorkerStore {
        WorkerStore {
            db: self.db.clone(),
        }
    }

    /// The web console's reads.
    pub fn console(&self) -> ConsoleReads {
        ConsoleReads {
            db: self.db.clone(),
        }
    }

    /// Session revocations and refresh turns.
    pub fn sessions(&self) -> Sessions {
        Sessions {
            db: self.db.clone(),
        }
    }

    /// Notifications and figures.
    pub fn shared(&self) -> SharedStore {
        SharedStore {
            db: self.db.clone(),
        }
    }
}

impl ReplicaStore {
    /// Notifications and figures, on the same connections.
    pub fn shared(&self) -> SharedStore {
        SharedStore {
            db: self.db.clone(),
        }
    }

    /// Readiness: the database answers a trivial query, on a connection of its own.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query!("SELECT 1 AS one")
            .fetch_one(self.db.probe())
            .await
            .db()?;
        Ok(())
    }
}

impl WorkerStore {
    /// Notifications and figures, on the same connections.
    pub fn shared(&self) -> SharedStore {
        SharedStore {
            db: self.db.clone(),
        }
    }
}

impl SharedStore {
    /// The most connections the pool opens.
    pub fn max_connections(&self) -> u32 {
        self.db.pool().options().get_max_connections()
    }

    /// A setting as the store's sessions run with it (`current_setting`), for diagnostics.
    pub async fn setting(&self, name: &str) -> Result<String> {
        sqlx::query_scalar!(r#"SELECT current_setting($1) AS "setting!""#, name)
            .fetch_one(self.db.pool())
            .await
            .db()
    }
}
