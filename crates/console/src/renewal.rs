//! Renewing OAuth sessions: a session signed in through the authorization server keeps
//! the refresh token it was given (encrypted in its cookie, like the access token) and,
//! once the access token is about to expire (or the authenticator refuses it), spends it
//! at the token endpoint on the next request, on whichever replica that lands, and goes
//! on with a new cookie. The session's own expiry does not move: renewal keeps a session
//! alive for as long as it was going to live, no longer.
//!
//! Refresh-token rotation (OAuth 2.1 asks it of public clients, which the console is):
//! each renewal may spend the refresh token and hand out a new one, and a second use of
//! a spent one is taken as theft, revoking the whole grant. Requests of one session that
//! come at once all carry the same cookie, so they would all spend the same token. So a
//! renewal takes the session's turn in the store (`Sessions::refresh_turn`, one advisory
//! lock per session) and records what it made, encrypted, keyed by a digest of the
//! spent token; a request that comes later with that token takes the recorded successor
//! instead of spending it again. Records are kept for `REMEMBER_MS`, longer than any
//! request carrying a spent token is in flight.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use oauth2::{RefreshToken, RequestTokenError, TokenResponse};
use sha2::{Digest, Sha256};

use super::session::{COOKIE, MAX_TOKEN_BYTES, NoViewer, Session, Viewer, cookie_name, now_ms};
use super::{layout, oauth, signin};
use mcp_tasks_server::AppState;

use crate::Console;
use mcp_tasks_server::core::time_of;

/// How long a renewal's successor is remembered for the requests still carrying the
/// refresh token it spent.
const REMEMBER_MS: i64 = 5 * 60 * 1000;
/// A request renews at most this often: one that spent an old token may be handed a
/// successor that is itself due.
const MAX_RENEWALS: usize = 3;

/// Why a session could not be renewed.
#[derive(Debug)]
pub(crate) enum RenewError {
    /// The authorization server refused (revoked, expired) or could not be reached: the
    /// session is over, and the viewer signs in again.
    Ended(String),
    /// The store could not take the session's turn (`true`: unreachable).
    Store(bool),
}

impl RenewError {
    fn respond(self, state: &AppState) -> Response {
        match self {
            Self::Ended(why) => {
                tracing::info!(reason = %why, "console: session not renewed");
                signin::ended(
                    state,
                    &format!("Your session has ended: {why}. Sign in again."),
                )
            }
            Self::Store(unavailable) => layout::unavailable(if unavailable {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            }),
        }
    }
}

impl Session {
    /// Whether the access token is due for renewal (only sessions with a refresh token).
    pub(crate) fn renewal_due(&self) -> bool {
        self.refresh.is_some() && self.renew_ms.is_some_and(|at| at <= now_ms())
    }
}

/// `session` (of a request with `headers`) renewed: taken from an earlier renewal that
/// spent the same refresh token, or by spending it at the token endpoint; never when it
/// was signed out.
pub(crate) async fn renew(
    state: &Console,
    headers: &HeaderMap,
    session: &Session,
) -> Result<Session, RenewError> {
    let Some(refresh) = session.refresh.as_deref() else {
        return Err(RenewError::Ended("it cannot be renewed".into()));
    };
    let store = |e: mcp_tasks_store::StoreError| RenewError::Store(e.is_unavailable());
    if let Some(owner) = session.owner(state, headers).await
        && session.revoked(state, &owner).await.map_err(store)?
    {
        return Err(RenewError::Ended("it was signed out".into()));
    }
    let spent = Sha256::digest(refresh.as_bytes());
    let mut turn = state
        .sessions()
        .refresh_turn(&session.nonce)
        .await
        .map_err(store)?;
    if let Some(successor) = turn.successor(&spent).await.map_err(store)?
        && let Some(next) = Session::open(state, &successor)
        && next.nonce == session.nonce
    {
        return Ok(next);
    }
    // The turn is held across the token endpoint's answer (its client times out after
    // 10 s, well within the store's idle-in-transaction limit); dropped on failure.
    let next = exchange(state, session, refresh).await?;
    if let Err(e) = turn
        .record(&spent, &next.seal(state), time_of(now_ms() + REMEMBER_MS))
        .await
    {
        tracing::warn!(error = %e, "console: a renewal was not recorded; requests of the session made at the same time may end it");
    }
    Ok(next)
}

async fn exchange(
    state: &Console,
    session: &Session,
    refresh: &str,
) -> Result<Session, RenewError> {
    let provider = oauth::provider(state).await.map_err(RenewError::Ended)?;
    // The client the token was issued to, which may be another replica's registration.
    let client_id = session.client_id.as_deref().unwrap_or(&provider.client_id);
    let (client, resource) =
        oauth::client_as(state, &provider, client_id).map_err(RenewError::Ended)?;
    let response = client
        .exchange_refresh_token(&RefreshToken::new(refresh.to_owned()))
        .add_extra_param("resource", resource)
        .request_async(&provider.http)
        .await
        .map_err(|e| {
            RenewError::Ended(match e {
                RequestTokenError::ServerResponse(r) => {
                    format!(
                        "the authorization server refused to renew it ({})",
                        r.error()
                    )
                }
                RequestTokenError::Request(_) => {
                    "the authorization server could not be reached".into()
                }
                _ => "the authorization server's answer could not be read".into(),
            })
        })?;
    let token = response.access_token().secret();
    if token.len() > MAX_TOKEN_BYTES {
        return Err(RenewError::Ended(
            "the renewed access token is too large for a session cookie".into(),
        ));
    }
    let mut next = session.clone();
    next.token = Some(token.clone());
    oauth::keep(&mut next, &response);
    Ok(next)
}

/// Middleware for every console route: a session with a refresh token is renewed when
/// due (or when its token is refused), the request goes on with the renewed cookie (and
/// the viewer it resolved, so handlers do not verify the token again), and the answer
/// sets the new cookie unless the handler set one itself (signing out).
pub(crate) async fn middleware(
    State(state): State<Console>,
    mut request: Request,
    next: Next,
) -> Response {
    // Signing in again goes ahead whatever the old session's state; signing out ends
    // the session as it is (spending its refresh token first would be for nothing).
    let path = request.uri().path();
    let skip = path.starts_with("/console/oauth/") || path == "/console/signout";
    let Some(mut current) =
        Session::from_headers(&state, request.headers()).filter(|s| s.refresh.is_some() && !skip)
    else {
        return next.run(request).await;
    };
    let mut renewed = false;
    for _ in 0..MAX_RENEWALS {
        if !current.renewal_due() {
            break;
        }
        match renew(&state, request.headers(), &current).await {
            Ok(next) => current = next,
            Err(e) => return e.respond(&state),
        }
        renewed = true;
    }
    let mut viewer = Viewer::with_session(&state, request.headers(), current.clone()).await;
    if !renewed && matches!(viewer, Err(NoViewer::Refused(_))) {
        // Refused before its time (expired early, clocks apart, revoked at the server).
        match renew(&state, request.headers(), &current).await {
            Ok(next) => current = next,
            Err(e) => return e.respond(&state),
        }
        renewed = true;
        viewer = Viewer::with_session(&state, request.headers(), current.clone()).await;
    }
    if let Ok(viewer) = viewer {
        request.extensions_mut().insert(viewer);
    }
    if renewed {
        replace_cookie(&state, request.headers_mut(), &current.seal(&state));
    }
    let mut response = next.run(request).await;
    let ours = format!("{}=", cookie_name(&state, COOKIE));
    let handler_set_one = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| v.as_bytes().starts_with(ours.as_bytes()));
    if renewed && !handler_set_one {
        response
            .headers_mut()
            .append(header::SET_COOKIE, current.set_cookie(&state));
    }
    response
}

/// The request's `Cookie` headers, with the session cookie's value `sealed`.
fn replace_cookie(state: &AppState, headers: &mut HeaderMap, sealed: &str) {
    let name = cookie_name(state, COOKIE);
    let others: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| pair.split_once('=').is_some_and(|(k, _)| k != name))
        .map(str::to_owned)
        .collect();
    let mut all = others;
    all.push(format!("{name}={sealed}"));
    if let Ok(value) = HeaderValue::from_str(&all.join("; ")) {
        headers.insert(header::COOKIE, value);
    }
}
