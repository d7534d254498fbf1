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
//!   creates, it sends at most one NOTIFY per interval, whose payload says which tenants
//!   it concerns ([`Tenants`]: workers ignore it, a console's lists of other tenants
//!   need not look again);
//! - cancellation of a running task notifies directly; it is rare.
//!
//! The payloads are written here and in the migrations' trigger, and read in one place:
//! `Event::parse` in `events.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{Db, DbResult, ReplicaStore, Result};

/// Something may be claimable: a task was created, resumed after input, or released. The
/// payload is the tenants it concerns ([`Tenants::payload`]); an empty one (as earlier
/// releases send) concerns every tenant.
pub(crate) const RUNNABLE: &str = "mcp_tasks_runnable";

/// Cancellation was requested for a leased task; the payload is its id.
pub(crate) const CANCEL: &str = "mcp_tasks_cancel";

/// A watched task changed; the payload is `<id> <version>` (written by the trigger of
/// migration `20261129000002_task_watches`).
pub(crate) const CHANGED: &str = "mcp_tasks_changed";

/// `application_name` of LISTEN connections, so operators (and the chaos harness, which
/// kills them) can tell them from pool connections.
pub const LISTENER_APPLICATION_NAME: &str = "mcp-tasks-listen";

/// Which tenants a wake-up concerns, folded into 64 bits: each tenant sets two bits
/// chosen by a digest of its name, and a wake-up may concern a tenant when both of that
/// tenant's bits are set. One wake-up stands for every task a replica made runnable in
/// its interval, whatever their number or tenants, in a payload of 16 characters. It is
/// a hint like the wake-up itself: a tenant whose bits another set by chance (about one
/// in a thousand with one other tenant in a wake-up, a few in a hundred with five) only
/// looks again for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenants(u64);

impl Tenants {
    /// Every tenant (what an empty or unreadable payload says).
    pub const ALL: Self = Self(u64::MAX);
    /// No tenant yet.
    pub const NONE: Self = Self(0);

    /// One tenant.
    pub fn of(tenant: &str) -> Self {
        // FNV-1a: stable across processes and releases, which the bits must be.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in tenant.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self((1 << (h & 63)) | (1 << ((h >> 32) & 63)))
    }

    /// Both sets together.
    pub fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether this set may include every tenant of `other`.
    pub fn may_include(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The NOTIFY payload.
    pub(crate) fn payload(self) -> String {
        format!("{:016x}", self.0)
    }

    /// The set a payload names ([`Tenants::ALL`] for an empty or unreadable one).
    pub(crate) fn parse(payload: &str) -> Self {
        match u64::from_str_radix(payload, 16) {
            Ok(bits) if payload.len() == 16 => Self(bits),
            _ => Self::ALL,
        }
    }
}

/// Coalesces "wake the workers" requests into at most one NOTIFY per interval.
#[derive(Clone, Debug)]
pub struct Waker {
    pending: Arc<Notify>,
    /// The tenants of the wake-ups asked for since the last NOTIFY.
    tenants: Arc<AtomicU64>,
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
        let tenants = Arc::new(AtomicU64::new(0));
        let waker = Self {
            pending: pending.clone(),
            tenants: tenants.clone(),
        };
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = pending.notified() => {}
                    () = shutdown.cancelled() => return,
                }
                let payload = Tenants(tenants.swap(0, Ordering::SeqCst)).payload();
                let sent = tokio::select! {
                    sent = store.db.notify(RUNNABLE, &payload) => sent,
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

    /// Asks for a wake-up for work of `tenant`. Never blocks; requests made while one is
    /// being sent are folded into the next.
    pub fn wake(&self, tenant: &str) {
        self.tenants
            .fetch_or(Tenants::of(tenant).0, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_fold_into_a_payload_and_back() {
        let (a, b) = (Tenants::of("acme"), Tenants::of("globex"));
        assert_eq!(a, Tenants::of("acme"), "stable");
        assert_eq!(a.0.count_ones().clamp(1, 2), a.0.count_ones());
        let both = a.with(b);
        assert!(both.may_include(a) && both.may_include(b));
        assert!(!a.may_include(b) || a == b);
        assert_eq!(Tenants::parse(&both.payload()), both);
        assert_eq!(Tenants::parse(""), Tenants::ALL, "an earlier release's");
        assert_eq!(Tenants::parse("xyz"), Tenants::ALL);
        assert!(Tenants::ALL.may_include(a));
        assert!(!Tenants::NONE.may_include(a));
    }
}
