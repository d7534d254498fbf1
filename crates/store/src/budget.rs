//! The connection budget: how many connections this process may open at most, beside
//! what the server allows and has in use, checked once at start-up (see the README,
//! *Connection budget*, for a fleet's sum).

use crate::{DbResult, Result, Store};

/// This process's most connections, and the server's room for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionBudget {
    /// The pool's maximum, plus the probe's one, plus `long_lived` (LISTEN, the wake-up
    /// duty) as the caller counted them.
    pub this_process: u32,
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
                        AS "in_use!""#
        )
        .fetch_one(self.db.pool())
        .await
        .db()?;
        Ok(ConnectionBudget {
            this_process: self
                .shared()
                .max_connections()
                .saturating_add(1)
                .saturating_add(long_lived),
            server_allows: row.allows,
            in_use: row.in_use,
        })
    }
}
