//! Who is looking at the console: the session cookie, its CSRF token, and the [`Viewer`]
//! every page and action is served to.
//!
//! Replicas keep nothing, so the session lives in its cookie (`mcp_tasks_console`, or
//! `__Host-mcp_tasks_console` where the public scheme is https: see [`cookie_name`]),
//! encrypted and authenticated (AES-256-GCM, `StateKeys::encrypt`) under the state keys
//! every replica shares, so any replica opens it and rotation works as for 2025-era
//! session ids: the bearer token the viewer signed in with (none with `--auth none`), an
//! OAuth refresh token and when to use it (see `refresh`), a random nonce, and an
//! expiry. Encrypted, because a copy of the cookie (a log, a proxy, a shared machine)
//! must not hand out the tokens themselves. Every request verifies the access token
//! again with the API's own authenticator, so an expired or foreign token never gets
//! further than it would on `/mcp`. The CSRF token of a session is the nonce sealed
//! under another prefix: only this service can make it, and it fits one session only.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use mcp_tasks_store::{Owner, Revocation, StoreError, TaskRecord};
use serde::{Deserialize, Serialize};

use mcp_tasks_server::AppState;
use mcp_tasks_server::AuthError;
use mcp_tasks_server::ConsoleConfig;
use mcp_tasks_server::core::time_of;

pub(crate) const COOKIE: &str = "mcp_tasks_console";
/// `mcpc1.` cookies (signed, not encrypted) open no more: their holders sign in again.
const SESSION_PREFIX: &str = "mcpc2.";
const CSRF_PREFIX: &str = "mcpx1.";
/// Browsers keep cookies of up to about 4 KiB.
pub(crate) const MAX_COOKIE_BYTES: usize = 4000;
/// Longest bearer token a session can carry, with its refresh token if it has one (what
/// fits in the cookie once encrypted: the JSON around them, nonce and tag, base64).
pub(crate) const MAX_TOKEN_BYTES: usize = 2750;
/// Room the cookie keeps for the client id (of a session renewed through OAuth, see
/// `renewal`), besides the tokens' `MAX_TOKEN_BYTES`.
pub(crate) const MAX_CLIENT_ID_BYTES: usize = 64;

/// What the session cookie carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Session {
    /// The bearer token; `None` before sign-in, and with an authenticator that needs none.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
    /// The OAuth refresh token the access token is renewed with (`refresh`).
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub(crate) refresh: Option<String>,
    /// When to renew the access token (Unix milliseconds), a little before it expires.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    pub(crate) renew_ms: Option<i64>,
    /// The OAuth client the refresh token was issued to (each replica may have
    /// registered its own).
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_id: Option<String>,
    #[serde(rename = "n")]
    pub(crate) nonce: String,
    /// Unix milliseconds.
    #[serde(rename = "i")]
    pub(crate) issued_ms: i64,
    #[serde(rename = "x")]
    pub(crate) expires_ms: i64,
}

/// The console's settings (the console is served only when they are set).
pub(crate) fn settings(state: &AppState) -> Option<&ConsoleConfig> {
    state.config().console.as_ref()
}

pub(crate) fn now_ms() -> i64 {
    let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
    i64::try_from(now).unwrap_or(i64::MAX)
}

impl Session {
    /// A new session (a new nonce, so a new CSRF token) lasting the configured session time.
    pub(crate) fn new(state: &AppState, token: Option<String>) -> Self {
        let ttl = i64::try_from(state.config().session_ttl.as_millis()).unwrap_or(i64::MAX);
        let now = now_ms();
        Self {
            token,
            refresh: None,
            renew_ms: None,
            client_id: None,
            nonce: mcp_tasks_server::core::nonce(),
            issued_ms: now,
            expires_ms: now.saturating_add(ttl),
        }
    }

    /// The session of a request, when its cookie is one this service sealed and unexpired.
    pub(crate) fn from_headers(state: &AppState, headers: &HeaderMap) -> Option<Self> {
        Self::open(state, cookie(state, headers, COOKIE)?)
    }

    /// The session `sealed` holds (a cookie's value), when this service sealed it (under
    /// any of the state keys), unaltered and unexpired.
    pub(crate) fn open(state: &AppState, sealed: &str) -> Option<Self> {
        let json = state
            .state_keys()
            .decrypt(SESSION_PREFIX, sealed, MAX_COOKIE_BYTES)?;
        let session: Self = serde_json::from_slice(&json).ok()?;
        (session.expires_ms > now_ms()).then_some(session)
    }

    /// The session encrypted, as its cookie's value.
    pub(crate) fn seal(&self, state: &AppState) -> String {
        state.state_keys().encrypt(
            SESSION_PREFIX,
            &serde_json::to_vec(self).unwrap_or_default(),
        )
    }

    /// The session's name among revocations (apart from those of 2025-era sessions).
    pub(crate) fn revocation_name(&self) -> String {
        format!("console.{}", self.nonce)
    }

    /// The API's own authenticator sees a console request as it came, with the session's
    /// token as its credentials (and no other).
    fn credentials(&self, headers: &HeaderMap) -> Result<HeaderMap, NoViewer> {
        let mut credentials = headers.clone();
        credentials.remove(header::AUTHORIZATION);
        credentials.remove(header::COOKIE);
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| NoViewer::Refused(AuthError::Invalid("malformed token".into())))?;
            credentials.insert(header::AUTHORIZATION, value);
        }
        Ok(credentials)
    }

    /// Whose the session is, by its token even when that has expired (an OAuth session
    /// lives on with its refresh token; see `Authenticator::identify_expired`); `None`
    /// when its token says nothing certain (none at all, or one refused outright).
    pub(crate) async fn owner(&self, state: &AppState, headers: &HeaderMap) -> Option<Owner> {
        let credentials = self.credentials(headers).ok()?;
        match state.auth().identify_expired(&credentials).await {
            Ok(identity) => Some(identity.owner),
            Err(e) => {
                tracing::debug!(reason = %e, "console: the session's token names nobody");
                None
            }
        }
    }

    /// Whether the session was ended (on whichever replica), by its owner's revocations.
    pub(crate) async fn revoked(
        &self,
        state: &AppState,
        owner: &Owner,
    ) -> Result<bool, StoreError> {
        state
            .sessions()
            .session_revoked(owner, &self.revocation_name(), time_of(self.issued_ms))
            .await
    }

    /// Ends the session for every replica (sign-out), until it would have expired.
    pub(crate) async fn revoke(&self, state: &AppState, owner: &Owner) -> Result<(), StoreError> {
        let ttl_ms = i64::try_from(state.config().session_ttl.as_millis()).unwrap_or(i64::MAX);
        state
            .sessions()
            .revoke_session(
                owner,
                &Revocation {
                    session: &self.revocation_name(),
                    expires_at: time_of(self.expires_ms),
                    session_ttl_ms: ttl_ms,
                    max_per_owner: state.config().max_session_revocations,
                },
            )
            .await
    }

    pub(crate) fn csrf(&self, state: &AppState) -> String {
        state.state_keys().seal(CSRF_PREFIX, self.nonce.as_bytes())
    }

    /// Whether `token` is this session's CSRF token.
    pub(crate) fn csrf_matches(&self, state: &AppState, token: &str) -> bool {
        state
            .state_keys()
            .open(CSRF_PREFIX, token, 256)
            .is_some_and(|nonce| nonce == self.nonce.as_bytes())
    }

    /// `Set-Cookie` for this session.
    pub(crate) fn set_cookie(&self, state: &AppState) -> HeaderValue {
        let sealed = self.seal(state);
        let max_age = (self.expires_ms - now_ms()).max(0) / 1000;
        cookie_header(state, COOKIE, &sealed, "/console", max_age, "Strict")
    }
}

/// `Set-Cookie` that deletes the session.
pub(crate) fn clear_cookie(state: &AppState) -> HeaderValue {
    cookie_header(state, COOKIE, "", "/console", 0, "Strict")
}

pub(crate) fn cookie_header(
    state: &AppState,
    name: &str,
    value: &str,
    path: &str,
    max_age: i64,
    same_site: &str,
) -> HeaderValue {
    let secure = secure(state);
    let name = cookie_name(state, name);
    // A `__Host-` cookie must be `Secure`, for path `/`, and name no domain.
    let (path, secure) = if secure {
        ("/", "; Secure")
    } else {
        (path, "")
    };
    let text = format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite={same_site}{secure}"
    );
    // Sealed values are base64url and dots: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// Whether the console's cookies are `Secure` (the public scheme is https).
fn secure(state: &AppState) -> bool {
    settings(state).is_some_and(|c| c.secure_cookies)
}

/// The name cookie `base` goes by. With `Secure` cookies, `__Host-` prefixed: a browser
/// then takes it only from this very host, over https, for path `/`, so a sibling
/// subdomain (which may set cookies for the whole parent domain) cannot toss in one of
/// that name.
pub(crate) fn cookie_name(state: &AppState, base: &str) -> String {
    if secure(state) {
        format!("__Host-{base}")
    } else {
        base.to_owned()
    }
}

/// The value of cookie `base` (by [`cookie_name`]) in the request's `Cookie` headers,
/// when it comes exactly once. Two of one name mean one was tossed in by another party
/// (a sibling subdomain, a path of its own choosing, to come first): neither is taken.
pub(crate) fn cookie<'a>(state: &AppState, headers: &'a HeaderMap, base: &str) -> Option<&'a str> {
    let name = cookie_name(state, base);
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v);
    let first = found.next()?;
    if found.next().is_some() {
        tracing::info!(cookie = %name, "console: a cookie came twice; neither is taken");
        return None;
    }
    Some(first)
}

/// Whoever a console page is served to: signed in (or, with an authenticator that needs
/// no token, simply there), verified by the API's authenticator on this very request.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    pub(crate) owner: Owner,
    /// Sees every task of its tenant (status and timeline; never others' arguments,
    /// answers or results).
    pub(crate) is_admin: bool,
    pub(crate) session: Session,
    pub(crate) csrf: String,
    /// When the viewer's credentials expire: the token's `exp` or the session's own
    /// expiry, whichever comes first (a live stream ends then).
    pub(crate) expires: Option<std::time::SystemTime>,
}

impl Viewer {
    /// Whether the viewer may see this task at all: its own, or any of its tenant's as an
    /// admin. Never another tenant's.
    pub(crate) fn can_see(&self, task: &TaskRecord) -> bool {
        self.may_see(&task.owner)
    }

    /// [`Viewer::can_see`] for a task of `owner`.
    pub(crate) fn may_see(&self, owner: &Owner) -> bool {
        owner.tenant == self.owner.tenant && (*owner == self.owner || self.is_admin)
    }

    /// Whether the task is the viewer's own: only then are its arguments, answers and
    /// result shown, and only then can it be answered.
    pub(crate) fn is_owner(&self, task: &TaskRecord) -> bool {
        task.owner == self.owner
    }

    /// Who the viewer is, for the layout's header.
    pub(crate) fn label(&self) -> String {
        let role = if self.is_admin { " (admin)" } else { "" };
        format!("{} / {}{role}", self.owner.tenant, self.owner.principal)
    }

    /// Resolves the viewer of a request: `Err` with why there is none.
    pub(crate) async fn resolve(state: &AppState, headers: &HeaderMap) -> Result<Self, NoViewer> {
        let session = Session::from_headers(state, headers).ok_or(NoViewer::NoSession)?;
        Self::with_session(state, headers, session).await
    }

    /// The viewer `session` makes of a request.
    pub(crate) async fn with_session(
        state: &AppState,
        headers: &HeaderMap,
        session: Session,
    ) -> Result<Self, NoViewer> {
        Self::check(state, headers, session, true).await
    }

    /// [`Viewer::with_session`] again for a live stream's check: the same verification,
    /// but no request is counted against the rate limit.
    pub(crate) async fn again(
        state: &AppState,
        headers: &HeaderMap,
        session: Session,
    ) -> Result<Self, NoViewer> {
        Self::check(state, headers, session, false).await
    }

    async fn check(
        state: &AppState,
        headers: &HeaderMap,
        session: Session,
        count: bool,
    ) -> Result<Self, NoViewer> {
        let identity = state
            .auth()
            .identify(&session.credentials(headers)?)
            .await
            .map_err(NoViewer::Refused)?;
        let is_admin = match (
            settings(state).and_then(|c| c.admin_claim.as_ref()),
            &identity.claims,
        ) {
            (Some(claim), Some(claims)) => claim.holds(claims),
            _ => false,
        };
        if count && state.over_rate_limit(&identity.owner) {
            return Err(NoViewer::RateLimited);
        }
        // Signed out (on whichever replica): the session is over even if its token is not.
        let revoked = session
            .revoked(state, &identity.owner)
            .await
            .map_err(|e| NoViewer::Store(e.is_unavailable()))?;
        if revoked {
            return Err(NoViewer::SignedOut);
        }
        let csrf = session.csrf(state);
        let expires = mcp_tasks_server::core::sse::sooner(
            mcp_tasks_server::core::sse::expiry(identity.claims.as_ref()),
            Some(time_of(session.expires_ms).into()),
        );
        Ok(Self {
            owner: identity.owner,
            is_admin,
            session,
            csrf,
            expires,
        })
    }

    /// Whether `token` (a form's `csrf` field) is this session's.
    pub(crate) fn csrf_matches(&self, state: &AppState, token: Option<&str>) -> bool {
        token.is_some_and(|t| self.session.csrf_matches(state, t))
    }
}

/// Why a request has no viewer.
#[derive(Debug)]
pub(crate) enum NoViewer {
    NoSession,
    Refused(AuthError),
    /// The session was ended by signing out (on whichever replica).
    SignedOut,
    RateLimited,
    /// The store could not say whether the session was ended (`true`: unreachable).
    Store(bool),
}

/// `session` (new, with its token) once the API's authenticator accepts the token, set on
/// the answer `then()` makes; `Err` says why the token was refused.
pub(crate) async fn sign_in(
    state: &AppState,
    headers: &HeaderMap,
    session: Session,
    then: impl FnOnce() -> Response,
) -> Result<Response, String> {
    match Viewer::with_session(state, headers, session.clone()).await {
        Ok(viewer) => {
            tracing::info!(tenant = %viewer.owner.tenant, principal = %viewer.owner.principal, admin = viewer.is_admin, "console: signed in");
            let mut response = then();
            response
                .headers_mut()
                .insert(header::SET_COOKIE, session.set_cookie(state));
            Ok(response)
        }
        Err(NoViewer::Refused(e)) => Err(format!("the token was refused: {e}")),
        Err(NoViewer::RateLimited) => Err("too many requests; wait a moment".into()),
        Err(NoViewer::NoSession) => Err("no session".into()),
        Err(NoViewer::SignedOut) => Err("the session was signed out".into()),
        Err(NoViewer::Store(_)) => Err("the task store is unavailable; try again".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_server::StateKeys;

    #[test]
    fn the_largest_session_fits_in_its_cookie() {
        let access = MAX_TOKEN_BYTES / 2;
        let session = Session {
            token: Some("t".repeat(access)),
            refresh: Some("r".repeat(MAX_TOKEN_BYTES - access)),
            renew_ms: Some(i64::MAX),
            client_id: Some("c".repeat(MAX_CLIENT_ID_BYTES)),
            nonce: mcp_tasks_server::core::nonce(),
            issued_ms: i64::MAX,
            expires_ms: i64::MAX,
        };
        let sealed = StateKeys::random()
            .encrypt(SESSION_PREFIX, &serde_json::to_vec(&session).expect("json"));
        assert!(sealed.len() <= MAX_COOKIE_BYTES, "{}", sealed.len());
    }

    #[test]
    fn a_cookie_of_the_signed_format_opens_no_more() {
        let keys = StateKeys::random();
        let session = Session {
            token: Some("a token".into()),
            refresh: None,
            renew_ms: None,
            client_id: None,
            nonce: mcp_tasks_server::core::nonce(),
            issued_ms: 0,
            expires_ms: i64::MAX,
        };
        let json = serde_json::to_vec(&session).expect("json");
        let signed = keys.seal("mcpc1.", &json);
        assert_eq!(keys.open("mcpc1.", &signed, MAX_COOKIE_BYTES), Some(json));
        assert_eq!(
            keys.decrypt(SESSION_PREFIX, &signed, MAX_COOKIE_BYTES),
            None
        );
    }
}
