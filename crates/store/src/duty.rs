//! Wake-up duty: of the idle workers that run the same tools, one at a time answers the
//! "there is work" notifications, so that one notification costs one claim rather than
//! one per idle worker (see ARCHITECTURE.md, "Wake-ups").
//!
//! The duty is a session advisory lock, keyed by the worker's set of tools, held on a
//! connection of its own. Workers that want it queue on the lock in PostgreSQL's lock
//! manager, which hands it to the next one in line as soon as the holder lets go, or
//! its connection ends (a worker that dies passes the duty on by dying).
//!
//! A peer that vanishes without closing its socket is noticed within tens of seconds on
//! both ends: the server probes the connection (`Db::long_lived_options`), so a dead
//! worker's session, and the duty it holds, ends; and the worker bounds each wait for the
//! lock ([`DUTY_WAIT_ROUND`]) and checks the duty it holds ([`Duty::check`]), so a worker
//! whose server is gone opens a new connection instead of waiting on the old one forever.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{ConnectOptions, Connection};

use crate::{Db, DbResult, Result, WorkerStore};

/// The first key of the duty locks (the two-key form, so that it cannot collide with a
/// one-key advisory lock of anything else in the database): "mcpt".
const DUTY_CLASS: i32 = 0x6d63_7074;

/// `application_name` of duty connections, so operators can tell them apart.
pub const DUTY_APPLICATION_NAME: &str = "mcp-tasks-duty";

/// How long one wait for the duty lasts on the server (its `lock_timeout`) before the
/// worker queues again: an answer, the lock or the timeout, at least this often shows
/// the server is still there. Queueing again costs a statement and the place in line,
/// which matters not: the duty goes to whichever idle worker waits.
pub const DUTY_WAIT_ROUND: Duration = Duration::from_secs(20);

/// How long past what it should take the server may stay silent before the duty's
/// connection is given up for dead.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The server did not answer on the duty connection in time: as good as gone.
fn silent() -> crate::StoreError {
    let timed_out = std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the server did not answer on the duty connection",
    );
    crate::StoreError(crate::Repr::Database(sqlx::Error::Io(timed_out)))
}

/// `lock_not_available`: the wait for the lock reached `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// One worker's place in the duty queue of its tool set; see the module docs.
pub struct Duty {
    db: Db,
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

impl WorkerStore {
    /// A place in the duty queue; it connects on first use.
    pub fn duty(&self) -> Duty {
        Duty {
            db: self.db.clone(),
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
        let options = self.db.long_lived_options(DUTY_APPLICATION_NAME);
        let mut connection = tokio::time::timeout(ANSWER_WITHIN, options.connect())
            .await
            .map_err(|_| silent())?
            .db()?;
        // The duty is held on the primary, where the workers' wake-ups are.
        tokio::time::timeout(
            ANSWER_WITHIN,
            crate::primary::refuse_read_only(&mut connection),
        )
        .await
        .map_err(|_| silent())?
        .db()?;
        // The wait for the lock is the point: no statement timeout, and a lock timeout
        // only to hear from the server now and then. A server that can tell (PostgreSQL
        // 14 and later) drops a waiter whose worker is gone instead of handing it the duty
        // first.
        let lock_timeout = format!("SET lock_timeout = {}", DUTY_WAIT_ROUND.as_millis());
        for set in [
            "SET statement_timeout = 0",
            lock_timeout.as_str(),
            "SET client_connection_check_interval = 1000",
        ] {
            let done = tokio::time::timeout(
                ANSWER_WITHIN,
                sqlx::query(sqlx::AssertSqlSafe(set)).execute(&mut connection),
            )
            .await
            .map_err(|_| silent())?;
            if let Err(e) = done {
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
    /// Fails (and closes the connection) when the server is silent for longer than a
    /// wait lasts there, as a server that is gone is.
    pub async fn take(&mut self, key: i32) -> Result<()> {
        if self.held == Some(key) {
            return Ok(());
        }
        self.hand_over().await?;
        let mut connection = self.connection().await?;
        loop {
            let waited = tokio::time::timeout(
                DUTY_WAIT_ROUND + ANSWER_WITHIN,
                sqlx::query!("SELECT pg_advisory_lock($1, $2)", DUTY_CLASS, key)
                    .execute(&mut connection),
            )
            .await;
            match waited {
                Ok(Ok(_)) => break,
                // The server's lock timeout: still there; queue again.
                Ok(Err(sqlx::Error::Database(e)))
                    if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {}
                Ok(Err(e)) => return Err(e).db(),
                Err(_) => return Err(silent()),
            }
        }
        self.connection = Some(connection);
        self.held = Some(key);
        Ok(())
    }

    /// Checks that the server is still there to hold the duty for this worker (a trivial
    /// statement); if it does not answer in time, the connection is closed and the duty
    /// counts as lost. Call it every [`DUTY_WAIT_ROUND`] or so while holding the duty.
    pub async fn check(&mut self) -> Result<()> {
        if self.held.is_none() {
            return Ok(());
        }
        let Some(mut connection) = self.connection.take() else {
            self.held = None;
            return Ok(());
        };
        let answered = tokio::time::timeout(
            ANSWER_WITHIN,
            sqlx::query!("SELECT 1 AS one").fetch_one(&mut connection),
        )
        .await;
        match answered {
            Ok(Ok(_)) => {
                self.connection = Some(connection);
                Ok(())
            }
            Ok(Err(e)) => {
                self.held = None;
                Err(e).db()
            }
            Err(_) => {
                self.held = None;
                Err(silent())
            }
        }
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
            sqlx::query!("SELECT pg_advisory_unlock($1, $2)", DUTY_CLASS, key)
                .fetch_one(&mut connection),
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
