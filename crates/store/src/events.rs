//! The store's notifications as a typed, self-healing stream: [`SharedStore::events`].
//!
//! Each stream owns one LISTEN connection of its own, outside the pool (a pool may close
//! idle or old connections, and a listener must never wait in the pool's queue), named
//! [`LISTENER_APPLICATION_NAME`] so operators (and the chaos harness) can find it. The
//! stream reconnects by itself with backoff, and probes its connection by notifying
//! itself on a private channel: a connection that does not hear its own probe in time
//! is replaced, since a silently broken one would otherwise wait forever.
//!
//! After every (re)connect, and whenever it receives a notification it cannot read, the
//! stream yields [`Event::Resync`]: notifications may have been missed, so whoever
//! depends on them reads the database again. Everything else it yields is a hint too;
//! see the module docs of [`crate::notify`] for what each one costs.

use std::time::Duration;

use mcp_tasks_wire::backoff::Backoff;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::time::Instant;

use crate::notify::{CANCEL, CHANGED, LISTENER_APPLICATION_NAME, RUNNABLE, Tenants};
use crate::{Db, DbResult, Result, SharedStore, TaskId};

/// What a stream listens for. [`Event::Resync`] comes whatever is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// [`Event::Runnable`]: for workers (and for a replica whose console lists look for
    /// new tasks when it comes).
    Runnable,
    /// [`Event::CancelRequested`]: for workers.
    CancelRequested,
    /// [`Event::Changed`]: for replicas that push changes to subscribers.
    Changed,
}

impl EventKind {
    fn channel(self) -> &'static str {
        match self {
            Self::Runnable => RUNNABLE,
            Self::CancelRequested => CANCEL,
            Self::Changed => CHANGED,
        }
    }
}

/// A notification, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Something may be claimable: a task was created, resumed after input, or released,
    /// of one of these tenants.
    Runnable(Tenants),
    /// Cancellation was requested for this task while a worker held it.
    CancelRequested(TaskId),
    /// A watched task changed; `version` is its version after the change.
    Changed { id: TaskId, version: i64 },
    /// Notifications may have been missed (the stream has just connected or reconnected,
    /// or could not read one): read again whatever depends on them.
    Resync,
}

impl Event {
    /// The one place that reads payloads; the migrations' trigger and the statements that
    /// notify (`notify.rs`) write them. `None` for a payload that does not parse.
    fn parse(channel: &str, payload: &str) -> Option<Self> {
        let task = |s: &str| uuid::Uuid::try_parse(s).ok().map(TaskId);
        match channel {
            RUNNABLE => Some(Self::Runnable(Tenants::parse(payload))),
            CANCEL => task(payload).map(Self::CancelRequested),
            CHANGED => {
                let (id, version) = payload.split_once(' ')?;
                Some(Self::Changed {
                    id: task(id)?,
                    version: version.parse().ok()?,
                })
            }
            _ => None,
        }
    }
}

/// How a stream looks after its connection.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// How often the connection is probed.
    pub probe_every: Duration,
    /// How long a probe may take before the connection is replaced.
    pub probe_timeout: Duration,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            probe_every: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(5),
        }
    }
}

/// Reconnect backoff: doubles from the first to the last, jittered.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(5);

/// A stream of [`Event`]s; see [`SharedStore::events`]. It does its work (reading the socket,
/// probing, reconnecting) only while [`Events::next`] is awaited, so poll it in a loop
/// that does nothing slow between calls. Dropping it closes its connection.
pub struct Events {
    db: Db,
    kinds: Vec<EventKind>,
    probe_channel: String,
    config: EventsConfig,
    connection: Option<Connection>,
    /// A Resync is owed: the connection is new.
    resync: bool,
    /// When the next connection attempt may start, after a failed one.
    retry_at: Option<Instant>,
    backoff: Backoff,
    nonce: u64,
}

struct Connection {
    listener: PgListener,
    probe: Probe,
}

#[derive(Debug, Clone, Copy)]
enum Probe {
    /// None in flight; the next one is due then.
    Due(Instant),
    /// Sent; the connection must hear it by `sent + probe_timeout`.
    Sent { nonce: u64, sent: Instant },
}

impl SharedStore {
    /// A stream of the notifications of these kinds (and [`Event::Resync`]). It connects
    /// on the first [`Events::next`]; nothing runs in the background.
    pub fn events(&self, kinds: &[EventKind], config: EventsConfig) -> Events {
        let mut kinds = kinds.to_vec();
        kinds.dedup();
        Events {
            db: self.db.clone(),
            kinds,
            probe_channel: format!("mcp_tasks_probe_{}", uuid::Uuid::new_v4().simple()),
            config,
            connection: None,
            resync: false,
            retry_at: None,
            backoff: Backoff::new(BACKOFF_FIRST, BACKOFF_LAST),
            nonce: 0,
        }
    }
}

impl Db {
    /// The options of a connection outside the pool that holds something for as long as
    /// it lives (a LISTEN registration, the wake-up duty), named `application_name`.
    ///
    /// Such a connection is idle most of the time, and the server learns that its peer is
    /// gone only by writing to it: without these settings, after the system's keepalive
    /// time of two hours. Meanwhile a dead worker's session keeps the duty from the next
    /// worker in line, and a dead listener keeps the notification queue from being
    /// trimmed past what it has not read (the queue fills, and NOTIFY fails everywhere).
    /// With them the server probes a silent peer after 10 s, every 5 s, and ends the
    /// session after 3 unanswered probes or 25 s of unacknowledged data, whichever comes
    /// first. They are the server's settings, for its end of the socket; sqlx (0.9) sets
    /// no keepalive on its own end, so each kind of connection looks after that itself:
    /// `Events` probes its connection by notifying itself, and `Duty` bounds every wait
    /// and checks the duty it holds (see there).
    ///
    /// Behind a pooler they are connections straight to PostgreSQL (a LISTEN or a session
    /// lock cannot live on a pooler's shared connections); otherwise to the pool's host.
    pub(crate) fn long_lived_options(&self, application_name: &str) -> PgConnectOptions {
        self.session_options()
            .application_name(application_name)
            .options([
                ("tcp_keepalives_idle", "10"),
                ("tcp_keepalives_interval", "5"),
                ("tcp_keepalives_count", "3"),
                ("tcp_user_timeout", "25000"),
            ])
    }

    /// A LISTEN connection of its own, outside the pool.
    async fn listen(&self, channels: &[&str]) -> Result<PgListener> {
        let options = self.long_lived_options(LISTENER_APPLICATION_NAME);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            // Short: a host that refuses (an old primary, gone) is retried by `Events`
            // with the pool's host as it is then, which a failover has moved.
            .acquire_timeout(Duration::from_secs(2))
            .after_connect(|connection, _| Box::pin(crate::primary::refuse_read_only(connection)))
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await.db()?;
        // A lost connection is replaced by `Events`, which then owes a Resync; sqlx
        // reconnecting behind its back would hide the gap.
        listener.eager_reconnect(false);
        listener.listen_all(channels.iter().copied()).await.db()?;
        Ok(listener)
    }
}

impl Events {
    /// The next event. Reconnects as long as it takes, so it only ever returns an event.
    ///
    /// Cancel-safe: dropping the future (in a `select!`) loses no event.
    pub async fn next(&mut self) -> Event {
        loop {
            let Some(connection) = self.connection.as_mut() else {
                self.connect().await;
                continue;
            };
            if std::mem::take(&mut self.resync) {
                return Event::Resync;
            }
            let deadline = match connection.probe {
                Probe::Due(at) => at,
                Probe::Sent { sent, .. } => sent + self.config.probe_timeout,
            };
            tokio::select! {
                // What has arrived first: a probe heard late is still heard, not timed out.
                biased;
                received = connection.listener.try_recv() => match received {
                    Ok(Some(n)) if n.channel() == self.probe_channel => {
                        if matches!(connection.probe, Probe::Sent { nonce, .. } if n.payload() == nonce.to_string()) {
                            connection.probe = Probe::Due(Instant::now() + self.config.probe_every);
                        }
                    }
                    Ok(Some(n)) => match Event::parse(n.channel(), n.payload()) {
                        Some(event) => return event,
                        None => {
                            tracing::warn!(channel = n.channel(), "unreadable notification; resynchronising");
                            return Event::Resync;
                        }
                    },
                    Ok(None) => {
                        tracing::warn!(kinds = ?self.kinds, "LISTEN connection lost; reconnecting");
                        self.connection = None;
                    }
                    Err(e) => {
                        tracing::warn!(kinds = ?self.kinds, error = %e, "LISTEN connection failed; reconnecting");
                        self.connection = None;
                    }
                },
                () = tokio::time::sleep_until(deadline) => match connection.probe {
                    Probe::Sent { .. } => {
                        tracing::warn!(kinds = ?self.kinds, "LISTEN connection did not hear its own probe; replacing it");
                        self.connection = None;
                    }
                    Probe::Due(_) => {
                        self.nonce += 1;
                        connection.probe = Probe::Sent { nonce: self.nonce, sent: Instant::now() };
                        // Bounded, because the pool's connections may be as stuck as this
                        // one. A probe not sent goes unheard and replaces the connection:
                        // right if the database is gone, and cheap if it is back.
                        let sent = tokio::time::timeout(
                            self.config.probe_timeout,
                            self.db.notify(&self.probe_channel, &self.nonce.to_string()),
                        )
                        .await;
                        match sent {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::debug!(error = %e, "could not send a LISTEN probe"),
                            Err(_) => tracing::debug!("sending a LISTEN probe timed out"),
                        }
                    }
                },
            }
        }
    }

    /// One connection attempt, after the backoff of the previous failure.
    async fn connect(&mut self) {
        if let Some(at) = self.retry_at {
            tokio::time::sleep_until(at).await;
        }
        let mut channels: Vec<&str> = self.kinds.iter().map(|k| k.channel()).collect();
        channels.push(&self.probe_channel);
        match self.db.listen(&channels).await {
            Ok(listener) => {
                tracing::info!(kinds = ?self.kinds, "LISTEN connection ready");
                self.connection = Some(Connection {
                    listener,
                    probe: Probe::Due(Instant::now() + self.config.probe_every),
                });
                self.resync = true;
                self.retry_at = None;
                self.backoff.reset();
            }
            Err(e) => {
                let delay = self.backoff.next_delay();
                tracing::warn!(
                    kinds = ?self.kinds,
                    error = %e,
                    retry_ms = delay.as_millis() as u64,
                    "LISTEN connection failed"
                );
                self.retry_at = Some(Instant::now() + delay);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_into_events() {
        let id = TaskId::random();
        assert_eq!(
            Event::parse(RUNNABLE, ""),
            Some(Event::Runnable(Tenants::ALL))
        );
        let acme = Tenants::of("acme");
        assert_eq!(
            Event::parse(RUNNABLE, &acme.payload()),
            Some(Event::Runnable(acme))
        );
        assert_eq!(
            Event::parse(CANCEL, &id.to_string()),
            Some(Event::CancelRequested(id))
        );
        assert_eq!(
            Event::parse(CHANGED, &format!("{id} 42")),
            Some(Event::Changed { id, version: 42 })
        );
        for (channel, bad) in [
            (CANCEL, "not-a-task"),
            (CHANGED, "not-a-task 1"),
            (CHANGED, &format!("{id}")),
            (CHANGED, &format!("{id} x")),
            ("mcp_tasks_other", ""),
        ] {
            assert_eq!(Event::parse(channel, bad), None, "{channel} {bad:?}");
        }
    }
}
