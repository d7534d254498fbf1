//! The shell every SSE response of a replica shares: each event carries one JSON-RPC
//! message, keep-alive comments keep idle connections open, and proxies are told not to
//! cache or buffer the stream. What a stream sends, and when it ends on its own account,
//! is its own [`EventSource`].
//!
//! The shell also keeps every stream to what it was opened with ([`Standing`]): a stream
//! outlives the request that checked its credentials, so the shell checks them again
//! every [`RECHECK`] and before each event (at most once a [`RECHECK_GAP`]), ends the
//! stream once they expire (a token's `exp`, a session's own expiry), are refused, or
//! were revoked (a console sign-out, a 2025-era session's `DELETE`, on whichever replica
//! it happened), and ends every stream after the replica's maximum stream lifetime
//! whatever its credentials, so that a client reconnects with what it holds now. How a
//! stream says goodbye is its own ([`EventSource::closing`]): a listen stream sends its
//! result, a 2025-era wait an error response, a console stream just ends (the browser
//! reconnects).

use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;
use mcp_tasks_store::Owner;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::AppState;

/// How often an open stream's credentials are checked again.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);
/// Least time between two checks made before events: a busy stream checks at most this
/// often, however many events it sends.
pub(crate) const RECHECK_GAP: Duration = Duration::from_secs(1);

/// The events of one SSE response, in order; `None` ends the response.
pub trait EventSource: Send + 'static {
    fn next_event(&mut self) -> impl Future<Output = Option<Event>> + Send;

    /// The last event of a stream the shell ends (`None`: it just ends).
    fn closing(&mut self, _end: End) -> Option<Event> {
        None
    }
}

/// Why the shell ended a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The credentials expired, or are refused now.
    Expired,
    /// The session was ended (signed out, `DELETE`), on whichever replica.
    Revoked,
    /// The viewer is no longer an admin of its tenant (the console).
    Demoted,
    /// The stream has been open for the replica's maximum stream lifetime.
    Lifetime,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "credentials expired or refused",
            Self::Revoked => "session ended",
            Self::Demoted => "admin claim lost",
            Self::Lifetime => "maximum stream lifetime reached",
        }
    }
}

/// What a check of a stream's credentials found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// The stream may go on, until `expires` at the latest.
    Good {
        expires: Option<SystemTime>,
    },
    Ended(End),
    /// Could not tell (the store is unreachable): the next check tries again.
    Unknown,
}

/// What a stream's right to go on rests on, checked again while it is open.
pub trait Standing: Send + 'static {
    fn check(&mut self, state: &AppState) -> impl Future<Output = Checked> + Send;
}

/// The standing of a stream opened with the API's own credentials (a bearer token, or
/// whatever the authenticator reads): they must still identify the same owner, and the
/// stream ends at their `exp`.
pub(crate) struct Bearer {
    headers: HeaderMap,
    owner: Owner,
}

impl Bearer {
    /// The credentials of the request that opens the stream (its cookies are left out:
    /// the API's authenticator never reads them).
    pub(crate) fn new(headers: &HeaderMap, owner: &Owner) -> Self {
        let mut headers = headers.clone();
        headers.remove(header::COOKIE);
        Self {
            headers,
            owner: owner.clone(),
        }
    }

    pub(crate) async fn verify(&self, state: &AppState) -> Checked {
        match state.auth().identify(&self.headers).await {
            Ok(identity) if identity.owner == self.owner => Checked::Good {
                expires: expiry(identity.claims.as_ref()),
            },
            Ok(_) => Checked::Ended(End::Expired),
            Err(e) => {
                tracing::debug!(reason = %e, "stream: credentials refused now");
                Checked::Ended(End::Expired)
            }
        }
    }
}

impl Standing for Bearer {
    async fn check(&mut self, state: &AppState) -> Checked {
        self.verify(state).await
    }
}

/// When verified `claims` expire (`exp`, seconds since the epoch).
pub fn expiry(claims: Option<&Map<String, Value>>) -> Option<SystemTime> {
    let exp = claims?.get("exp")?.as_f64()?;
    (exp.is_finite() && exp >= 0.0)
        .then(|| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(exp.min(4e11)))
}

/// The sooner of two expiries (`None`: never).
pub fn sooner(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The `text/event-stream` response that sends `source`'s events, with the replica's
/// keep-alive interval, for as long as `standing` holds and the replica's maximum stream
/// lifetime allows.
pub fn response(state: &AppState, source: impl EventSource, standing: impl Standing) -> Response {
    let guard = Guard::new(state, standing);
    let events = stream::unfold(Some((source, guard)), |shell| async move {
        let (mut source, mut guard) = shell?;
        match next(&mut source, &mut guard).await? {
            Next::Event(event) => Some((Ok::<_, Infallible>(event), Some((source, guard)))),
            Next::Last(event) => Some((Ok(event), None)),
        }
    });
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(state.config().keep_alive));
    let mut response = sse.into_response();
    let headers = response.headers_mut();
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

enum Next {
    Event(Event),
    /// The stream's closing event, after which nothing more is sent.
    Last(Event),
}

/// The next event of `source`, unless `guard` ends the stream first. The source's
/// future is kept (not dropped and made again) while checks run beside it, so a source
/// need not be cancel-safe for them.
async fn next<S: EventSource, G: Standing>(source: &mut S, guard: &mut Guard<G>) -> Option<Next> {
    let end = {
        let mut next = std::pin::pin!(source.next_event());
        loop {
            tokio::select! {
                event = &mut next => {
                    let event = event?;
                    match guard.before_event().await {
                        None => return Some(Next::Event(event)),
                        Some(end) => break end,
                    }
                }
                end = guard.due() => {
                    if let Some(end) = end {
                        break end;
                    }
                }
            }
        }
    };
    if end == End::Lifetime {
        tracing::debug!(reason = end.as_str(), "stream ended; the client reconnects");
    } else {
        tracing::info!(reason = end.as_str(), "stream ended");
    }
    source.closing(end).map(Next::Last)
}

/// A stream's standing and its deadlines.
struct Guard<G> {
    state: AppState,
    standing: G,
    /// When the credentials expire, as last checked.
    expires: Option<Instant>,
    /// The end of the stream's lifetime.
    ends: Instant,
    next_check: Instant,
    last_check: Option<Instant>,
}

impl<G: Standing> Guard<G> {
    fn new(state: &AppState, standing: G) -> Self {
        let now = Instant::now();
        let lifetime = state.config().max_stream_lifetime;
        // Up to a tenth shorter, and the first check anywhere in the first interval:
        // streams opened together (a deploy's reconnects) do not all check, or end, at
        // once.
        let ends = now + lifetime.mul_f64(1.0 - rand::random::<f64>() / 10.0);
        Self {
            state: state.clone(),
            standing,
            expires: None,
            ends,
            next_check: now + RECHECK.mul_f64(rand::random::<f64>()),
            last_check: None,
        }
    }

    /// The end a deadline that has passed makes.
    fn deadline_passed(&self) -> Option<End> {
        let now = Instant::now();
        if now >= self.ends {
            Some(End::Lifetime)
        } else if self.expires.is_some_and(|at| now >= at) {
            Some(End::Expired)
        } else {
            None
        }
    }

    /// Resolves at the next check or deadline: `Some` when the stream must end.
    async fn due(&mut self) -> Option<End> {
        let deadline = self.expires.map_or(self.ends, |at| at.min(self.ends));
        tokio::time::sleep_until(deadline.min(self.next_check)).await;
        if let Some(end) = self.deadline_passed() {
            return Some(end);
        }
        self.check().await
    }

    /// Before an event goes out: `Some` when the stream must end instead.
    async fn before_event(&mut self) -> Option<End> {
        if let Some(end) = self.deadline_passed() {
            return Some(end);
        }
        if self.last_check.is_some_and(|at| at.elapsed() < RECHECK_GAP) {
            return None;
        }
        self.check().await
    }

    async fn check(&mut self) -> Option<End> {
        let checked = self.standing.check(&self.state).await;
        let now = Instant::now();
        self.last_check = Some(now);
        self.next_check = now + RECHECK;
        match checked {
            Checked::Good { expires } => {
                self.expires = expires.map(|at| {
                    now + at
                        .duration_since(SystemTime::now())
                        .unwrap_or(Duration::ZERO)
                });
                self.deadline_passed()
            }
            Checked::Ended(end) => Some(end),
            Checked::Unknown => None,
        }
    }
}

/// One SSE event carrying one JSON-RPC message on a single `data:` line.
pub fn frame(message: &Value) -> Event {
    Event::default().data(message.to_string())
}
