//! What the replica knows about each open connection: whether a request is in progress,
//! since when it has been idle, and whether the head of its next request has started to
//! arrive. The connection's own task reads this to time it out; the acceptor reads it to
//! pick the connection that has been idle longest when the cap is reached.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

const NONE: u64 = u64::MAX;

/// Every open client connection of one replica.
pub(super) struct Registry {
    origin: Instant,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Connections answered only with 503 (and health probes) because the cap was reached.
    refusing: AtomicUsize,
    /// Connections asked to close to make room, that have not closed yet.
    evicting: AtomicUsize,
}

/// Whether a new connection is served, answered 503, or closed unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    Serve,
    Refuse,
    Drop,
}

impl Registry {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            refusing: AtomicUsize::new(0),
            evicting: AtomicUsize::new(0),
        })
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides what a new connection gets: served while fewer than `cap` are served
    /// (making room by closing the connection idle longest, if one is); past that, up to
    /// `overflow` more are answered 503; the rest are closed at once.
    pub(super) fn admit(&self, cap: usize, overflow: usize) -> Admission {
        let conns = self.conns();
        let refusing = self.refusing.load(Ordering::Relaxed);
        let evicting = self.evicting.load(Ordering::Relaxed);
        let served = conns.len().saturating_sub(refusing + evicting);
        if served < cap {
            return Admission::Serve;
        }
        let oldest_idle = conns
            .values()
            .filter(|c| !c.refusing && !c.evicted.load(Ordering::Relaxed) && c.is_idle())
            .min_by_key(|c| c.idle_since.load(Ordering::Relaxed))
            .cloned();
        if let Some(conn) = oldest_idle {
            conn.evicted.store(true, Ordering::Relaxed);
            self.evicting.fetch_add(1, Ordering::Relaxed);
            conn.wake.notify_one();
            return Admission::Serve;
        }
        if refusing < overflow {
            return Admission::Refuse;
        }
        Admission::Drop
    }

    /// Registers a connection; it leaves the registry when the returned handle is dropped.
    pub(super) fn open(self: &Arc<Self>, refusing: bool) -> Registered {
        let now = self.now_ms();
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            origin: self.origin,
            refusing,
            accepted: now,
            in_flight: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            idle_since: AtomicU64::new(now),
            head_started: AtomicU64::new(NONE),
            write_stalled: AtomicU64::new(NONE),
            http2: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
        });
        if refusing {
            self.refusing.fetch_add(1, Ordering::Relaxed);
        }
        self.conns().insert(conn.id, conn.clone());
        Registered {
            registry: self.clone(),
            conn,
        }
    }

    /// Client connections open, served or being refused.
    pub(super) fn len(&self) -> usize {
        self.conns().len()
    }

    fn now_ms(&self) -> u64 {
        millis_since(self.origin)
    }
}

fn millis_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(NONE - 1)
}

/// A connection's place in the registry.
pub(super) struct Registered {
    registry: Arc<Registry>,
    pub(super) conn: Arc<Conn>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.conns().remove(&self.conn.id);
        if self.conn.refusing {
            self.registry.refusing.fetch_sub(1, Ordering::Relaxed);
        }
        if self.conn.evicted.load(Ordering::Relaxed) {
            self.registry.evicting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One connection's state, shared by its task, its requests and its socket.
pub(super) struct Conn {
    id: u64,
    origin: Instant,
    /// Served past the cap: health probes answered, everything else 503.
    pub(super) refusing: bool,
    accepted: u64,
    /// Requests whose answer has not been sent in full (HTTP/2: open streams).
    in_flight: AtomicUsize,
    /// Requests started on this connection.
    started: AtomicU64,
    /// When the last answer was sent (or the connection accepted); ms since `origin`.
    idle_since: AtomicU64,
    /// When the first byte of the next request arrived while idle, or `NONE`.
    head_started: AtomicU64,
    /// Since when the socket has taken none of what the replica writes, or `NONE`.
    write_stalled: AtomicU64,
    http2: AtomicBool,
    /// Asked to close to make room for a new connection.
    pub(super) evicted: AtomicBool,
    /// Something the connection's task must look at: a request ended, or it was evicted.
    pub(super) wake: Notify,
}

/// What the connection is waiting for, when nothing is in progress on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// The head of a request (on a new connection: its first bytes too).
    Head,
    /// A next request that has not started.
    Idle,
}

impl Conn {
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// When nothing is in progress: what the connection waits for, and since when (as an
    /// instant). The clock for `Head` on a kept-alive HTTP/2 connection never starts:
    /// its bytes between requests are pings and settings, not a head.
    pub(super) fn waiting(&self) -> Option<(Wait, Instant)> {
        if !self.is_idle() {
            return None;
        }
        let at = |ms: u64| self.origin + std::time::Duration::from_millis(ms);
        if self.started.load(Ordering::Acquire) == 0 {
            return Some((Wait::Head, at(self.accepted)));
        }
        let head = self.head_started.load(Ordering::Acquire);
        if head != NONE && !self.http2.load(Ordering::Relaxed) {
            return Some((Wait::Head, at(head)));
        }
        Some((Wait::Idle, at(self.idle_since.load(Ordering::Acquire))))
    }

    /// Counts a request from its head to the end of its answer.
    pub(super) fn start_request(self: &Arc<Self>, version: axum::http::Version) -> RequestGuard {
        if version == axum::http::Version::HTTP_2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(NONE, Ordering::Release);
        RequestGuard { conn: self.clone() }
    }

    /// Since when the client has read nothing of what the replica has to send, if it
    /// has not: a reader that stopped holds its connection (and a listen stream its
    /// permit) whether requests are in progress or not.
    pub(super) fn write_stalled_since(&self) -> Option<Instant> {
        match self.write_stalled.load(Ordering::Acquire) {
            NONE => None,
            ms => Some(self.origin + std::time::Duration::from_millis(ms)),
        }
    }

    fn write_blocked(&self) {
        if self.write_stalled.load(Ordering::Relaxed) == NONE
            && self
                .write_stalled
                .compare_exchange(
                    NONE,
                    millis_since(self.origin),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.wake.notify_one();
        }
    }

    fn write_progressed(&self) {
        if self.write_stalled.load(Ordering::Relaxed) != NONE {
            self.write_stalled.store(NONE, Ordering::Release);
        }
    }

    fn bytes_arrived(&self) {
        if self.is_idle()
            && self.head_started.load(Ordering::Relaxed) == NONE
            && !self.http2.load(Ordering::Relaxed)
        {
            let _ = self.head_started.compare_exchange(
                NONE,
                millis_since(self.origin),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }
}

/// A request in progress; dropped when its answer has been sent (or abandoned).
pub(super) struct RequestGuard {
    conn: Arc<Conn>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let conn = &self.conn;
        conn.idle_since
            .store(millis_since(conn.origin), Ordering::Release);
        conn.head_started.store(NONE, Ordering::Release);
        if conn.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            conn.wake.notify_one();
        }
    }
}

/// An answer's body that keeps its request counted as in progress until hyper has sent
/// the last of it and let go.
pub(super) struct GuardedBody {
    inner: Body,
    _guard: RequestGuard,
}

impl GuardedBody {
    pub(super) fn new(inner: Body, guard: RequestGuard) -> Self {
        Self {
            inner,
            _guard: guard,
        }
    }
}

impl HttpBody for GuardedBody {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, noting when the next request's first bytes arrive on an idle connection.
pub(super) struct TrackedIo<T> {
    inner: T,
    conn: Arc<Conn>,
}

impl<T> TrackedIo<T> {
    pub(super) fn new(inner: T, conn: Arc<Conn>) -> Self {
        Self { inner, conn }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.bytes_arrived();
        }
        polled
    }
}

impl<T> TrackedIo<T> {
    fn note_write<R>(&self, polled: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match &polled {
            Poll::Pending => self.conn.write_blocked(),
            Poll::Ready(_) => self.conn.write_progressed(),
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.note_write(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn later() {
        std::thread::sleep(std::time::Duration::from_millis(3));
    }

    #[test]
    fn at_the_cap_the_oldest_idle_makes_room_then_busy_ones_refuse_then_drop() {
        let r = Registry::new();
        let a = r.open(false);
        later();
        let b = r.open(false);
        later();
        assert_eq!(r.admit(2, 1), Admission::Serve, "room for one more");
        assert!(
            a.conn.evicted.load(Ordering::Relaxed),
            "the oldest idle goes"
        );
        assert!(!b.conn.evicted.load(Ordering::Relaxed));
        let c = r.open(false);
        let _busy_b = b.conn.start_request(axum::http::Version::HTTP_11);
        let _busy_c = c.conn.start_request(axum::http::Version::HTTP_11);
        assert_eq!(r.admit(2, 1), Admission::Refuse, "nothing idle to close");
        let _d = r.open(true);
        assert_eq!(r.admit(2, 1), Admission::Drop, "the overflow is full too");
        drop(a);
        assert_eq!(r.admit(2, 1), Admission::Drop, "b and c still fill the cap");
        drop(_busy_c);
        assert_eq!(r.admit(2, 1), Admission::Serve, "c is idle again");
        assert!(c.conn.evicted.load(Ordering::Relaxed));
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn a_connection_waits_for_a_head_then_for_idleness() {
        let r = Registry::new();
        let c = r.open(false);
        assert_eq!(
            c.conn.waiting().map(|w| w.0),
            Some(Wait::Head),
            "new: a head"
        );
        let guard = c.conn.start_request(axum::http::Version::HTTP_11);
        c.conn.bytes_arrived();
        assert_eq!(c.conn.waiting(), None, "busy: no clock");
        drop(guard);
        assert_eq!(c.conn.waiting().map(|w| w.0), Some(Wait::Idle));
        c.conn.bytes_arrived();
        assert_eq!(
            c.conn.waiting().map(|w| w.0),
            Some(Wait::Head),
            "a next head"
        );
        let guard = c.conn.start_request(axum::http::Version::HTTP_2);
        drop(guard);
        c.conn.bytes_arrived();
        assert_eq!(
            c.conn.waiting().map(|w| w.0),
            Some(Wait::Idle),
            "HTTP/2 bytes between requests are not a head"
        );
    }
}
