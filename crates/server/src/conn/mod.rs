//! The transport below the router: accepting connections, HTTP/1.1 and HTTP/2 through
//! hyper, and keeping slow, idle and excess clients from holding the replica.
//!
//! - hyper serves each connection (`hyper_util::server::conn::auto`), with its HTTP/2
//!   limits: concurrent streams, header list size, and resets (rapid reset).
//! - Each connection's task times it out: the head of a request must arrive within the
//!   header timeout of its first byte (of the accept, on a new connection), and a
//!   connection with nothing in progress is closed after the idle timeout, as is one
//!   whose client has read nothing of its answers for that long. hyper's own HTTP/1
//!   header timer cannot tell an idle connection from a slow head (it also runs while
//!   idle), and the protocol detection of `auto` reads the first bytes with no timer at
//!   all, so the task keeps the clocks; hyper's timer stays as a backstop.
//! - At most `max_connections` are served. Past that, the connection idle longest is
//!   closed to make room; when none is idle, a few more get health probes answered and
//!   503 for anything else, and the rest are closed at once. The cap is checked against
//!   the open-file limit, so the database pool and the LISTEN connections always have
//!   descriptors.
//! - Accept errors back off, and are logged once per burst with a count.

mod burst;
pub(crate) mod settings;
mod track;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Method, Request, Response, Version, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use self::burst::Burst;
use self::settings::{ConnectionConfig, OVERFLOW_CONNECTIONS};
use self::track::{Admission, GuardedBody, Registered, Registry, Wait};
use crate::AppState;
use crate::http;

/// HTTP/2 streams a client may open and reset before the server answers, before the
/// connection is closed: h2's default, named here because it is the rapid-reset
/// (CVE-2023-44487) defence.
const H2_MAX_PENDING_RESETS: usize = 20;
/// HTTP/2 streams the server may reset because of the client's errors, before it
/// closes the connection (hyper's default, RUSTSEC-2024-0003).
const H2_MAX_LOCAL_RESETS: usize = 1024;

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, asks
/// every connection to close once its requests are answered, and returns when they have.
/// `app` is [`router`](crate::router) for `state`, with whatever else the binary serves
/// beside the API merged in (the console's routes): the server does not know them, only
/// how to serve them.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let config = state.config().connections.clone();
    let limit = state
        .connection_limit()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    tracing::debug!(
        max_connections = limit.max_connections,
        file_limit = ?limit.file_limit,
        reserved = limit.reserved,
        "connection limits"
    );
    let server = Arc::new(Server {
        builder: builder(&config),
        router: app,
        registry: Registry::new(),
        cap: limit.max_connections,
        config,
    });
    let connections = TaskTracker::new();
    let drain = CancellationToken::new();
    let mut shutdown = pin!(shutdown);
    let mut accept_errors = Burst::new("accepting connections fails");
    let mut refused = Burst::new("connections refused: the replica is at its connection cap");
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => {
                accept_errors.end();
                tcp
            }
            // The peer gave up before it was accepted: nothing to wait for.
            Err(e) if is_connection_error(&e) => {
                tracing::debug!(error = %e, "a connection was lost while being accepted");
                continue;
            }
            // Out of descriptors or memory: retrying at once would spin.
            Err(e) => {
                let pause = accept_errors.hit(&e.to_string());
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(pause) => continue,
                }
            }
        };
        // Without TCP_NODELAY, bodies written in several pieces (SSE frames, chunked
        // JSON) stall on Nagle's algorithm for about 40 ms each.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        let admission = server.registry.admit(server.cap, OVERFLOW_CONNECTIONS);
        match admission {
            Admission::Serve => refused.end(),
            Admission::Refuse | Admission::Drop => {
                refused.hit(&format!(
                    "cap {}, {} open",
                    server.cap,
                    server.registry.len()
                ));
            }
        }
        if admission == Admission::Drop {
            drop(tcp);
            continue;
        }
        let registered = server.registry.open(admission == Admission::Refuse);
        connections.spawn(server.clone().run(tcp, registered, drain.clone()));
    }
    drop(listener);
    // Listen streams end with their result; waits for a task get the drain grace.
    state.shutdown().cancel();
    drain.cancel();
    connections.close();
    connections.wait().await;
    // Every request has finished: nothing needs the hub or the waker any more.
    state.stop_background().await;
    Ok(())
}

struct Server {
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    registry: Arc<Registry>,
    cap: usize,
    config: ConnectionConfig,
}

fn builder(config: &ConnectionConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        // A backstop only: it runs from the end of one answer to the end of the next
        // head, which the connection's task bounds by idle + header already.
        .header_read_timeout(config.idle_timeout + config.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(config.h2_max_concurrent_streams)
        .max_header_list_size(config.h2_max_header_list_bytes)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_RESETS);
    builder
}

/// How an expired wait ends the connection.
#[derive(Debug, Clone, Copy)]
enum Close {
    /// Nothing of a request would be lost: drop the socket.
    Now,
    /// Let hyper close it (HTTP/2: with GOAWAY), in case a request starts meanwhile.
    Graceful,
}

impl Server {
    async fn run(
        self: Arc<Self>,
        tcp: TcpStream,
        registered: Registered,
        drain: CancellationToken,
    ) {
        let conn = registered.conn.clone();
        let io = TokioIo::new(track::TrackedIo::new(tcp, conn.clone()));
        let service = {
            let server = self.clone();
            let conn = conn.clone();
            hyper::service::service_fn(move |request: Request<Incoming>| {
                let guard = conn.start_request(request.version());
                let server = server.clone();
                let refusing = conn.refusing;
                async move {
                    let response = server.answer(request, refusing).await;
                    Ok::<_, Infallible>(response.map(|body| GuardedBody::new(body, guard)))
                }
            })
        };
        let mut connection = pin!(self.builder.serve_connection(io, service));
        let header = self.config.header_timeout;
        // A refused connection gets one answer, then is closed.
        let idle = if conn.refusing {
            Duration::ZERO
        } else {
            self.config.idle_timeout
        };
        let mut graceful = false;
        let mut evicted = false;
        // Once asked to close gracefully, how long it may stay with nothing in progress.
        let mut closing_by: Option<Instant> = None;
        loop {
            let due = earliest(
                due(conn.waiting(), header, idle, closing_by),
                stalled(conn.write_stalled_since(), self.config.idle_timeout),
            );
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = drain.cancelled(), if !graceful => {
                    graceful = true;
                    closing_by = Some(Instant::now() + header);
                    connection.as_mut().graceful_shutdown();
                }
                () = conn.wake.notified() => {
                    if !evicted && conn.evicted.load(std::sync::atomic::Ordering::Relaxed) {
                        evicted = true;
                        if conn.is_idle() {
                            tracing::debug!("idle connection closed to make room for a new one");
                            return;
                        }
                        // A request started since it was picked: it ends first.
                        closing_by = Some(Instant::now() + header);
                        graceful = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
                () = sleep_until(due), if due.is_some() => {
                    // Nothing ran on the connection while this task slept, except answers
                    // ending: check again what it waits for.
                    if stalled(conn.write_stalled_since(), self.config.idle_timeout)
                        .is_some_and(|(at, _)| at <= Instant::now())
                    {
                        tracing::debug!("connection closed: the client reads nothing of its answers");
                        return;
                    }
                    match self::due(conn.waiting(), header, idle, closing_by) {
                        Some((at, Close::Now)) if at <= Instant::now() => {
                            tracing::debug!("connection closed: no complete request head in time");
                            return;
                        }
                        Some((at, Close::Graceful)) if at <= Instant::now() => {
                            tracing::debug!("idle connection closed");
                            closing_by = Some(Instant::now() + header);
                            graceful = true;
                            connection.as_mut().graceful_shutdown();
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    async fn answer(
        &self,
        request: Request<Incoming>,
        refusing: bool,
    ) -> Response<axum::body::Body> {
        let probe = request.method() == Method::GET
            && matches!(request.uri().path(), "/healthz" | "/readyz");
        if refusing && !probe {
            let mut response = http::over_capacity(self.cap);
            if request.version() < Version::HTTP_2 {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            return response;
        }
        let version = request.version();
        let mut response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        if refusing && version < Version::HTTP_2 {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// When the connection's current wait expires, and how it then closes.
fn due(
    waiting: Option<(Wait, Instant)>,
    header: Duration,
    idle: Duration,
    closing_by: Option<Instant>,
) -> Option<(Instant, Close)> {
    let (wait, since) = waiting?;
    Some(match (wait, closing_by) {
        (Wait::Head, None) => (since + header, Close::Now),
        (Wait::Idle, None) => (since + idle, Close::Graceful),
        // Already asked to close: whatever keeps it open gets until `by`.
        (Wait::Head, Some(by)) => ((since + header).min(by), Close::Now),
        (Wait::Idle, Some(by)) => (by, Close::Now),
    })
}

/// A client that has read nothing of its answers for the idle timeout is as good as
/// gone, whatever is in progress.
fn stalled(since: Option<Instant>, limit: Duration) -> Option<(Instant, Close)> {
    since.map(|at| (at + limit, Close::Now))
}

fn earliest(a: Option<(Instant, Close)>, b: Option<(Instant, Close)>) -> Option<(Instant, Close)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

async fn sleep_until(due: Option<(Instant, Close)>) {
    match due {
        Some((at, _)) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graceful_closes_get_the_header_timeout_to_finish() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let idle = due(Some((Wait::Idle, t0)), s, 5 * s, None).expect("due");
        assert_eq!(idle.0, t0 + 5 * s);
        assert!(matches!(idle.1, Close::Graceful));
        let head = due(Some((Wait::Head, t0)), s, 5 * s, None).expect("due");
        assert_eq!(head.0, t0 + s);
        assert!(matches!(head.1, Close::Now));
        let closing = due(Some((Wait::Idle, t0)), s, 5 * s, Some(t0 + 2 * s)).expect("due");
        assert_eq!(closing.0, t0 + 2 * s);
        assert!(matches!(closing.1, Close::Now));
        assert!(due(None, s, 5 * s, Some(t0)).is_none(), "busy: no clock");
    }
}
