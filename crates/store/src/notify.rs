//! NOTIFY: the channels, their payloads, and the coalescing [`Waker`]. Notifications are
//! hints that carry ids at most; whoever receives one (through [`crate::Events`]) re-reads
//! the database, and everyone also polls as a backstop, so a lost notification only costs
//! latency.
//!
//! NOTIFY is not free: PostgreSQL serialises the commits of notifying transactions on a
//! cluster-wide lock (measured here: about 3.5k such commits per second). So:
//! - task changes notify only when some replica watches the task (a trigger whose WHEN
//!   clause checks `tasks.watched_until`; see the migration), with the payload
//!   `<id> <version>`;
//! - "there is work" wake-ups are coalesced by a [`Waker`]: however many tasks a replica
//!   creates, it sends at most one NOTIFY per interval;
//! - cancellation of a running task notifies directly; it is rare.
//!
//! The payloads are written here and in the migrations' trigger, and read in one place:
//! `Event::parse` in `events.rs`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{Db, DbResult, ReplicaStore, Result};

/// Something may be claimable: a task was created, resumed after input, or released. The
/// payload is empty.
pub(crate) const RUNNABLE: &str = "mcp_tasks_runnable";

/// Cancellation was requested for a leased task; the payload is its id.
pub(crate) const CANCEL: &str = "mcp_tasks_cancel";

/// A watched task changed; the payload is `<id> <version>` (written by the trigger of
/// migration `20261129000002_task_watches`).
pub(crate) const CHANGED: &str = "mcp_tasks_changed";

/// `application_name` of LISTEN connections, so operators (and the chaos harness, which
/// kills them) can tell them from pool connections.
pub const LISTENER_APPLICATION_NAME: &str = "mcp-tasks-listen";

/// Coalesces "wake the workers" requests into at most one NOTIFY per interval.
#[derive(Clone, Debug)]
pub struct Waker {
    pending: Arc<Notify>,
}

impl Waker {
    /// Starts the waker's task on `tasks` (so that shutdown can wait for it); it stops
    /// with `shutdown`, dropping a wake-up still pending then (workers poll anyway).
    pub fn start(
        store: ReplicaStore,
        every: Duration,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let pending = Arc::new(Notify::new());
        let waker = Self {
            pending: pending.clone(),
        };
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = pending.notified() => {}
                    () = shutdown.cancelled() => return,
                }
                let sent = tokio::select! {
                    sent = store.db.notify(RUNNABLE, "") => sent,
                    () = shutdown.cancelled() => return,
                };
                if let Err(e) = sent {
                    // Workers poll as a backstop; a lost wake-up costs latency only.
                    tracing::debug!(error = %e, "could not wake the workers");
                }
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        });
        waker
    }

    /// Asks for a wake-up. Never blocks; requests made while one is being sent are folded
    /// into the next.
    pub fn wake(&self) {
        self.pending.notify_one();
    }
}

impl Db {
    /// Sends one notification (a wake-up, or a stream's probe of its own connection).
    pub(crate) async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        sqlx::query!("SELECT pg_notify($1, $2)", channel, payload)
            .execute(self.pool())
            .await
            .db()?;
        Ok(())
    }
}
