//! Living on a primary that can move (failover to a standby, a proxy repointed).
//!
//! - **Only a writable server is used.** Every new connection checks that its server is
//!   neither a standby nor read-only ([`refuse_read_only`], the pools' `after_connect`):
//!   a proxy that still points at a demoted primary, or a standby listed first, is
//!   refused and the pool tries again.
//! - **Old connections go at once.** A sign that the server behind the connections
//!   changed (the server shutting down, a connection lost, a write refused as read-only:
//!   see [`saw`], called on every database error) marks the moment; every pooled
//!   connection opened before it is dropped when next taken ([`opened_since_change`],
//!   the pools' `before_acquire`), so one failed statement, not one per connection,
//!   moves a whole pool.
//! - **Several hosts.** `DATABASE_URL` may name several, libpq's way
//!   (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`). The pools
//!   connect to one; a [`Watch`] checks it every second and at every sign, and when it
//!   is gone or read-only, asks each host in the URL's order and repoints every pool at
//!   the first writable one. The LISTEN and duty connections take the pool's target
//!   when they next connect. Behind a pooler, the direct URL may name several hosts too:
//!   a watch of its own moves the [`SessionTarget`] those connections take.
//!
//! The marks are the process's, not a store's: a failover is a fact about the database,
//! and every pool of the process must leave the old primary. A needless mark (a store of
//! another database, in a test process) costs only reconnections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use tokio_util::task::AbortOnDropHandle;

/// The URL's `target_session_attrs` values the service accepts: it writes, so it never
/// wants anything but a writable server, whichever of these is given.
const SESSION_ATTRS: [&str; 3] = ["any", "read-write", "primary"];

/// How often a watch checks the pools' host, and how long one check or connection may take.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const CHECK_WITHIN: Duration = Duration::from_secs(1);
/// How soon a watch hears a sign.
const LOOK_EVERY: Duration = Duration::from_millis(100);

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// When the last sign was seen, in nanoseconds since [`EPOCH`] (0: never).
static CHANGED_AT: AtomicU64 = AtomicU64::new(0);

fn since_epoch() -> u64 {
    u64::try_from(EPOCH.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn mark() {
    CHANGED_AT.fetch_max(since_epoch().max(1), Ordering::Relaxed);
}

/// Notes a database error that says the server behind the connection changed or went:
/// the server shutting down (57P01..57P03), a connection exception (08), a lost
/// connection, or a write refused because the server is read-only (25006: a demoted
/// primary, or a standby reached through a proxy).
pub(crate) fn saw(error: &sqlx::Error) {
    let sign = match error {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(e) => e.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "25006" | "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    };
    if sign {
        mark();
    }
}

/// Whether a pooled connection of this age was opened after the last sign (and so may
/// be used).
pub(crate) fn opened_since_change(age: Duration) -> bool {
    let changed = CHANGED_AT.load(Ordering::Relaxed);
    let opened = since_epoch().saturating_sub(u64::try_from(age.as_nanos()).unwrap_or(u64::MAX));
    changed == 0 || opened > changed
}

/// Whether the connection's server takes writes.
async fn writable(connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT NOT (pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on')
            AS "writable!""#
    )
    .fetch_one(connection)
    .await
}

/// `after_connect`: a read-only server's connection is refused (and a sign).
pub(crate) async fn refuse_read_only(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    match writable(connection).await {
        Ok(true) => Ok(()),
        Ok(false) => {
            mark();
            Err(sqlx::Error::Protocol(
                "the server is read-only (a standby, or a primary being demoted): waiting for the primary".into(),
            ))
        }
        // Not answered (a pooler whose server is down): the connection is handed out as
        // it is, and its statement fails and is answered "retry later" as in any outage.
        // Refused here, sqlx would log an error at every attempt.
        Err(e) => {
            saw(&e);
            Ok(())
        }
    }
}

/// One host of the URL; no port: the URL's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
}

/// A `DATABASE_URL` taken apart: the URL with only its first host (and no
/// `target_session_attrs`, which sqlx does not know), and every host, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Targets {
    pub(crate) first: String,
    pub(crate) hosts: Vec<Host>,
}

/// Splits libpq's multi-host form; a URL of one host (or none: a socket in the query)
/// comes back as it was, without `target_session_attrs`.
pub(crate) fn targets(url: &str) -> Result<Targets, String> {
    let (url, attrs) = without_param(url, "target_session_attrs");
    if let Some(attrs) = attrs
        && !SESSION_ATTRS.contains(&attrs.as_str())
    {
        return Err(format!(
            "target_session_attrs={attrs} is not supported: the service writes, so it connects only to a writable server (leave it out, or use read-write)"
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(Targets {
            first: url,
            hosts: Vec::new(),
        });
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, list) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    if !list.contains(',') {
        return Ok(Targets {
            first: url.clone(),
            hosts: Vec::new(),
        });
    }
    let hosts = list.split(',').map(host).collect::<Result<Vec<_>, _>>()?;
    let first = list.split(',').next().unwrap_or_default();
    Ok(Targets {
        first: format!("{scheme}://{user}{first}{tail}"),
        hosts,
    })
}

fn host(spec: &str) -> Result<Host, String> {
    let bad = || format!("{spec:?} in DATABASE_URL's host list is not host[:port]");
    // `[::1]:5432`: the port is after the bracket.
    let (name, port) = match spec.rfind(']') {
        Some(close) => match spec[close + 1..].strip_prefix(':') {
            Some(port) => (&spec[..=close], Some(port)),
            None if close + 1 == spec.len() => (spec, None),
            None => return Err(bad()),
        },
        None => match spec.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (spec, None),
        },
    };
    if name.is_empty() {
        return Err(bad());
    }
    let port = port
        .map(|p| p.parse::<u16>().map_err(|_| bad()))
        .transpose()?;
    Ok(Host {
        name: name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port,
    })
}

/// The URL without one query parameter, and its value.
fn without_param(url: &str, key: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((k, v)) if k == key => {
                value = Some(v.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    if kept.is_empty() {
        (base.to_owned(), value)
    } else {
        (format!("{base}?{}", kept.join("&")), value)
    }
}

/// The pools' options pointed at `host`.
fn at(options: &PgConnectOptions, host: &Host) -> PgConnectOptions {
    let moved = options.clone().host(&host.name);
    match host.port {
        Some(port) => moved.port(port),
        None => moved,
    }
}

/// Where the store's connections of their own go (behind a pooler, the direct URL's
/// host), which a watch moves with the primary.
#[derive(Debug, Clone)]
pub(crate) struct SessionTarget(Arc<RwLock<PgConnectOptions>>);

impl SessionTarget {
    pub(crate) fn new(options: PgConnectOptions) -> Self {
        Self(Arc::new(RwLock::new(options)))
    }

    pub(crate) fn options(&self) -> PgConnectOptions {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn move_to(&self, host: &Host) {
        let mut options = self.0.write().unwrap_or_else(PoisonError::into_inner);
        *options = at(&options, host);
    }
}

/// Keeps a store's pools (and its session target) on the writable host of several;
/// stops when dropped. The last pool is the one it checks on.
pub(crate) struct Watch {
    _task: AbortOnDropHandle<()>,
}

impl Watch {
    pub(crate) fn start(
        hosts: Vec<Host>,
        pools: Vec<PgPool>,
        session: Option<SessionTarget>,
    ) -> Self {
        #[expect(
            clippy::disallowed_methods,
            reason = "owned by the store through AbortOnDropHandle: it stops with the last clone"
        )]
        let task = tokio::spawn(watch(hosts, pools, session));
        Self {
            _task: AbortOnDropHandle::new(task),
        }
    }
}

async fn watch(hosts: Vec<Host>, pools: Vec<PgPool>, session: Option<SessionTarget>) {
    let Some(probe) = pools.last().cloned() else {
        return;
    };
    let mut current = 0;
    let mut heard = CHANGED_AT.load(Ordering::Relaxed);
    let mut checked = Instant::now();
    // Since when no host has taken writes; at the start, so the first round asks them all
    // (the first host may be a standby).
    let mut lost_since = Some(Instant::now());
    let mut warned = false;
    loop {
        let changed = CHANGED_AT.load(Ordering::Relaxed);
        let signed = changed != heard || lost_since.is_some();
        if signed || checked.elapsed() >= CHECK_EVERY {
            heard = changed;
            checked = Instant::now();
            // Without a sign, the pools' host is asked on a pooled connection; after one,
            // every host in order on connections of their own (a pooled one may be to
            // the old primary, and a new one would wait out the pool's refusals).
            if signed || !still_writable(&probe).await {
                let lost = *lost_since.get_or_insert_with(Instant::now);
                let base = probe.connect_options().as_ref().clone();
                match find_writable(&base, &hosts).await {
                    Some(found) => {
                        lost_since = None;
                        warned = false;
                        if found != current {
                            for pool in &pools {
                                pool.set_connect_options(at(
                                    &pool.connect_options(),
                                    &hosts[found],
                                ));
                            }
                            if let Some(session) = &session {
                                session.move_to(&hosts[found]);
                            }
                            current = found;
                            // Connections to the old host go when next taken.
                            mark();
                            heard = CHANGED_AT.load(Ordering::Relaxed);
                            tracing::warn!(
                                host = %hosts[found].name,
                                port = hosts[found].port,
                                after_ms = lost.elapsed().as_millis() as u64,
                                "the primary is this host now: every pool connects to it"
                            );
                        }
                    }
                    // None yet (a standby being promoted): asked again at the next look.
                    None if lost.elapsed() >= CHECK_EVERY && !warned => {
                        warned = true;
                        tracing::warn!(
                            waited_ms = lost.elapsed().as_millis() as u64,
                            "no host of the database URL takes writes: asking them again until one does"
                        );
                    }
                    None => {}
                }
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Whether the pools' host answers as writable now.
async fn still_writable(probe: &PgPool) -> bool {
    let check = async {
        let mut connection = probe.acquire().await?;
        writable(&mut connection).await
    };
    matches!(
        tokio::time::timeout(CHECK_WITHIN, check).await,
        Ok(Ok(true))
    )
}

/// The first host, in the URL's order, whose server takes writes.
async fn find_writable(base: &PgConnectOptions, hosts: &[Host]) -> Option<usize> {
    for (i, host) in hosts.iter().enumerate() {
        let check = async {
            use sqlx::ConnectOptions;
            let mut connection = at(base, host).connect().await?;
            let answer = writable(&mut connection).await;
            drop(sqlx::Connection::close(connection).await);
            answer
        };
        match tokio::time::timeout(CHECK_WITHIN, check).await {
            Ok(Ok(true)) => return Some(i),
            Ok(Ok(false)) => {
                tracing::debug!(host = %host.name, port = host.port, "host is read-only")
            }
            Ok(Err(e)) => {
                tracing::debug!(host = %host.name, port = host.port, error = %e, "host did not answer")
            }
            Err(_) => {
                tracing::debug!(host = %host.name, port = host.port, "host did not answer in time")
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, port: Option<u16>) -> Host {
        Host {
            name: name.to_owned(),
            port,
        }
    }

    #[test]
    fn several_hosts_are_taken_apart_and_the_first_keeps_the_rest_of_the_url() {
        let t = targets(
            "postgres://u:p@db1:5432,db2,[::1]:6543/tasks?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(t.first, "postgres://u:p@db1:5432/tasks?sslmode=disable");
        assert_eq!(
            t.hosts,
            vec![h("db1", Some(5432)), h("db2", None), h("::1", Some(6543))]
        );
    }

    #[test]
    fn one_host_is_left_as_it_was_without_the_session_attrs() {
        let t = targets("postgres://u@db/tasks?target_session_attrs=primary").unwrap();
        assert_eq!(t.first, "postgres://u@db/tasks");
        assert!(t.hosts.is_empty());
        let t = targets("postgres:///tasks?host=/run/postgresql").unwrap();
        assert_eq!(t.first, "postgres:///tasks?host=/run/postgresql");
    }

    #[test]
    fn what_the_service_cannot_honour_is_refused_with_the_reason() {
        let e = targets("postgres://a,b/db?target_session_attrs=standby").unwrap_err();
        assert!(e.contains("target_session_attrs=standby"), "{e}");
        let e = targets("postgres://a:x,b/db").unwrap_err();
        assert!(e.contains("\"a:x\""), "{e}");
        let e = targets("postgres://a,,b/db").unwrap_err();
        assert!(e.contains("host[:port]"), "{e}");
    }

    #[test]
    fn a_connection_opened_before_a_sign_is_not_used_again() {
        let young = Duration::from_millis(1);
        mark();
        // Opened before the mark: as old as the process.
        assert!(!opened_since_change(
            EPOCH.elapsed() + Duration::from_secs(1)
        ));
        std::thread::sleep(Duration::from_millis(5));
        assert!(opened_since_change(young));
    }
}
