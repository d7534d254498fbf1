//! The connection budget: how many connections this process may open at most, beside
//! what the server allows and has in use, checked once at start-up (see the README,
//! *Connection budget*, for a fleet's sum).

use crate::{DbResult, Result, Store};

/// This process's most connections, and the server's room for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionBudget {
    /// The pool's maximum, plus the probe's one, plus `long_lived` (LISTEN, the wake-up
    /// duty) as the caller counted them; behind a pooler, only `long_lived`, the
    /// connections straight to the server (the pooler bounds the rest).
    pub this_process: u32,
    /// Whether the pools go through a pooler ([`crate::PoolConfig::direct_url`]).
    pub behind_pooler: bool,
    /// `synchronous_commit` as the pooled connections find it: anything but `on` can
    /// lose acknowledged tasks in a crash (behind a pooler, its `connect_query` or the
    /// role sets it, not this process).
    pub synchronous_commit: String,
    /// `jit` as the pooled connections find it: on, a claim at a million queued tasks
    /// spends some 40 ms compiling itself (see [`crate::Store::connect`]).
    pub jit: String,
    /// `max_connections` less `superuser_reserved_connections`.
    pub server_allows: i64,
    /// Connections open on the server now (every database and role), this process's
    /// included.
    pub in_use: i64,
}

impl ConnectionBudget {
    /// Whether the server has room for every connection this process may yet open.
    pub fn fits(&self) -> bool {
        self.in_use + i64::from(self.this_process) <= self.server_allows
    }
}

impl Store {
    /// Reads the server's limit and use; `long_lived` is the connections the process
    /// holds outside its pools.
    #[tracing::instrument(name = "db.budget", skip_all, err(level = "debug"))]
    pub async fn connection_budget(&self, long_lived: u32) -> Result<ConnectionBudget> {
        let row = sqlx::query!(
            r#"SELECT current_setting('max_connections')::int8
                        - current_setting('superuser_reserved_connections')::int8 AS "allows!",
                      (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
                        AS "in_use!",
                      current_setting('synchronous_commit') AS "synchronous_commit!",
                      current_setting('jit') AS "jit!""#
        )
        .fetch_one(self.db.pool())
        .await
        .db()?;
        let behind_pooler = self.db.session.is_some();
        let pooled = if behind_pooler {
            0
        } else {
            self.shared().max_connections().saturating_add(1)
        };
        Ok(ConnectionBudget {
            this_process: pooled.saturating_add(long_lived),
            behind_pooler,
            synchronous_commit: row.synchronous_commit,
            jit: row.jit,
            server_allows: row.allows,
            in_use: row.in_use,
        })
    }
}
