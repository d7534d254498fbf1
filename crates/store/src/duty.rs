//! Wake-up duty: of the idle workers that run the same tools, one at a time answers the
//! "there is work" notifications, so that one notification costs one claim rather than
//! one per idle worker (see ARCHITECTURE.md, "Wake-ups").
//!
//! The duty is a session advisory lock, keyed by the worker's set of tools, held on a
//! connection of its own. Workers that want it queue on the lock in PostgreSQL's lock
//! manager, which hands it to the next one in line as soon as the holder lets go, or
//! its connection ends (a worker that dies passes the duty on by dying).

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{ConnectOptions, Connection};

use crate::{DbResult, Result, Store};

/// The first key of the duty locks (the two-key form, so that it cannot collide with a
/// one-key advisory lock of anything else in the database): "mcpt".
const DUTY_CLASS: i32 = 0x6d63_7074;

/// `application_name` of duty connections, so operators can tell them apart.
pub const DUTY_APPLICATION_NAME: &str = "mcp-tasks-duty";

/// One worker's place in the duty queue of its tool set; see the module docs.
pub struct Duty {
    store: Store,
    connection: Option<PgConnection>,
    /// The key of the lock held, if any.
    held: Option<i32>,
}

impl std::fmt::Debug for Duty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Duty").field("held", &self.held).finish()
    }
}

/// The duty key of a set of tools: the same for every worker with the same tools, in any
/// order, on any build (FNV-1a, not std's hasher, whose output may change between
/// releases). Two sets that collide share a duty: a notification may then wake a worker
/// that cannot run the new task, and the one that can finds it by its poll.
pub fn duty_key(tools: &[String]) -> i32 {
    let mut names: Vec<&str> = tools.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let mut hash: u32 = 0x811c_9dc5;
    for name in names {
        for byte in name.bytes().chain(std::iter::once(0)) {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    i32::from_ne_bytes(hash.to_ne_bytes())
}

impl Store {
    /// A place in the duty queue; it connects on first use.
    pub fn duty(&self) -> Duty {
        Duty {
            store: self.clone(),
            connection: None,
            held: None,
        }
    }
}

impl Duty {
    /// The connection, taken out while a statement runs on it: a statement whose future
    /// is dropped (a wait for the lock, cancelled) takes the connection with it, and the
    /// next one opens a new one.
    async fn connection(&mut self) -> Result<PgConnection> {
        if let Some(connection) = self.connection.take() {
            return Ok(connection);
        }
        // Whatever it held ended with it.
        self.held = None;
        let options = self
            .store
            .pool()
            .connect_options()
            .as_ref()
            .clone()
            .application_name(DUTY_APPLICATION_NAME);
        let mut connection = options.connect().await.db()?;
        // The wait for the lock is the point: no statement or lock timeout. A server that
        // can tell (PostgreSQL 14 and later) drops a waiter whose worker is gone instead
        // of handing it the duty first.
        for set in [
            "SET statement_timeout = 0",
            "SET lock_timeout = 0",
            "SET client_connection_check_interval = 1000",
        ] {
            if let Err(e) = sqlx::query(set).execute(&mut connection).await {
                tracing::debug!(error = %e, statement = set, "duty connection setting refused");
            }
        }
        Ok(connection)
    }

    /// The key of the duty this worker holds, if any.
    pub fn held(&self) -> Option<i32> {
        self.held
    }

    /// Waits until this worker has the duty of `key` (letting go of another one first).
    /// Cancel-safe: a wait that is dropped closes its connection, which leaves the queue.
    pub async fn take(&mut self, key: i32) -> Result<()> {
        if self.held == Some(key) {
            return Ok(());
        }
        self.hand_over().await?;
        let mut connection = self.connection().await?;
        sqlx::query("SELECT pg_advisory_lock($1, $2)")
            .bind(DUTY_CLASS)
            .bind(key)
            .execute(&mut connection)
            .await
            .db()?;
        self.connection = Some(connection);
        self.held = Some(key);
        Ok(())
    }

    /// Lets the next worker in line have the duty. On any failure the connection is
    /// closed, which lets go of the lock just as well.
    pub async fn hand_over(&mut self) -> Result<()> {
        let Some(key) = self.held.take() else {
            return Ok(());
        };
        let Some(mut connection) = self.connection.take() else {
            return Ok(());
        };
        let released = tokio::time::timeout(
            Duration::from_secs(5),
            sqlx::query("SELECT pg_advisory_unlock($1, $2)")
                .bind(DUTY_CLASS)
                .bind(key)
                .execute(&mut connection),
        )
        .await;
        match released {
            Ok(Ok(_)) => {
                self.connection = Some(connection);
                Ok(())
            }
            Ok(Err(e)) => Err(e).db(),
            Err(_) => Err(crate::StoreError::corrupt(
                "handing over the duty timed out",
            )),
        }
    }

    /// Closes the connection, which ends the duty and the place in the queue.
    pub async fn close(&mut self) {
        self.held = None;
        if let Some(connection) = self.connection.take() {
            let _ = connection.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duty_keys_depend_on_the_set_of_tools_only() {
        let set = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            duty_key(&set(&["a", "b"])),
            duty_key(&set(&["b", "a", "a"]))
        );
        assert_ne!(duty_key(&set(&["a", "b"])), duty_key(&set(&["a"])));
        // Names are separated: "ab" is not "a" then "b".
        assert_ne!(duty_key(&set(&["ab"])), duty_key(&set(&["a", "b"])));
    }
}
