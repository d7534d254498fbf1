//! The web console at `/console`: tasks, a task (live), the inbox of input waiting for
//! the signed-in principal, and queue health, served by every replica from PostgreSQL.
//!
//! Pages are rendered on the server with `maud` (compile-time checked, escaped by
//! default) and are complete without JavaScript: reading works with scripts off, a
//! reload shows the current state, and every action is a plain form POST answered with
//! 303 back to the page. The only scripts are a few inline lines on the task page that
//! follow `GET /console/tasks/{id}/events` (SSE, from the same push hub as the
//! `subscriptions/listen` streams) and put the new status, message and input forms in
//! place, and as few on the tasks list, the inbox and the health page (`live_list`,
//! `live_inbox`, `live_health`). That is all the live parts need, so neither htmx nor
//! any other library is shipped: nothing to vendor, pin or build, and the
//! Content-Security-Policy allows those scripts by their hashes and nothing else.
//!
//! Access follows the API's rules (`session`): the API's authenticator verifies the
//! session's bearer token on every request, a principal sees its own tasks, an admin
//! (`ConsoleConfig::admin_claim`) its whole tenant, and a task it cannot see answers the
//! same 404 as an id that never existed. Every POST carries the session's CSRF token and
//! no foreign `Origin`.
//!
//! `list`, `inbox` and `health` are the other pages; they use `session::Viewer` and
//! `layout::page` like the task page does.
//!
//! The console is served beside the API, not by it: the binary merges [`routes`] into
//! `mcp_tasks_server::router` of the same state. It reaches the replica only through
//! `AppState` and the server's `core` module, so what it does that the API does too
//! (cancel, answers, streams and their limits, access) is the API's own code.

mod actions;
mod extract;
mod form;
mod health;
mod inbox;
mod layout;
mod list;
mod live;
mod live_health;
mod live_inbox;
mod live_list;
mod oauth;
mod provider;
mod renewal;
mod schema_form;
mod script;
pub(crate) mod session;
mod signin;
mod standing;
mod task;
mod timeline;

use std::ops::Deref;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine;
use sha2::{Digest, Sha256};

use mcp_tasks_server::AppState;

// The console's settings live with the server's (`ServerConfig::console`), which they
// switch on; they are named here too, where they are used.
pub use mcp_tasks_server::{AdminClaim, ConsoleConfig};

use provider::OAuthCache;

/// The console's state: its replica's, and what the console keeps of its own for the
/// replica's life (what it learnt of the OAuth authorization server). It reads as the
/// replica's state (`Deref`), so code that needs only that takes `&AppState` (or
/// `State<AppState>`, through `FromRef`) and is handed either.
#[derive(Clone)]
pub(crate) struct Console {
    api: AppState,
    oauth: Arc<OAuthCache>,
}

impl Deref for Console {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.api
    }
}

impl FromRef<Console> for AppState {
    fn from_ref(console: &Console) -> Self {
        console.api.clone()
    }
}

/// The console's routes, all under `/console`, for `state`'s replica: merge them into
/// `mcp_tasks_server::router` of the same state. None when `ServerConfig::console` is
/// unset, so `/console` answers 404 there.
pub fn routes(state: AppState) -> Router {
    if state.config().console.is_none() {
        return Router::new();
    }
    let state = Console {
        api: state,
        oauth: Arc::default(),
    };
    Router::new()
        .route("/console", get(home))
        .route("/console/", get(home))
        .route("/console/signin", get(signin::page).post(signin::submit))
        .route("/console/signout", post(signin::signout))
        .route("/console/oauth/start", get(oauth::start))
        .route("/console/oauth/callback", get(oauth::callback))
        .route("/console/tasks/{id}", get(task::page))
        .route("/console/tasks/{id}/events", get(live::events))
        // The live parts' streams are routed here, not by their pages: each stream
        // renders with its page's code, so the page must not refer back to it.
        .route("/console/tasks/events", get(live_list::events))
        .route("/console/inbox/events", get(live_inbox::events))
        .route("/console/health/events", get(live_health::events))
        .route("/console/tasks/{id}/cancel", post(actions::cancel))
        .route("/console/tasks/{id}/answer", post(actions::answer))
        .merge(list::routes())
        .merge(inbox::routes())
        .merge(health::routes())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            renewal::middleware,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// `GET /console`: the tasks, or the sign-in page for a request without a viewer.
async fn home(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    match session::Viewer::resolve(&state, &headers).await {
        Ok(_) => Redirect::to("/console/tasks").into_response(),
        Err(_) => Redirect::to("/console/signin").into_response(),
    }
}

/// Every console request: the API's Host/Origin check (DNS rebinding), and for anything
/// but a read, no cross-site request at all (`Origin` must name this very host, and a
/// browser's `Sec-Fetch-Site` must not say cross-site). Then headers that keep pages out
/// of frames, caches and referrers.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Err(reason) =
        mcp_tasks_server::core::check_host_and_origin(&state.config().allowed_hosts, headers)
    {
        tracing::warn!(%reason, "console request refused: host or origin not allowed");
        return layout::forbidden(&reason);
    }
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads && let Err(reason) = same_origin(headers) {
        tracing::info!(%reason, "console action refused");
        return layout::forbidden(reason);
    }
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, csp());
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser's form posts carry
    // `Origin: null`, which the origin check (rightly) refuses, so no form would work.
    // Other sites still get no referrer.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// An action's `Origin`, when sent, is this host's; `Sec-Fetch-Site`, when sent, is not
/// `cross-site` (nor `same-site`: another subdomain is another party).
fn same_origin(headers: &axum::http::HeaderMap) -> Result<(), &'static str> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin
            .to_str()
            .map_err(|_| "the Origin header is not valid")?;
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/').to_ascii_lowercase());
        if authority.is_none() || authority != host {
            return Err("the request comes from another origin");
        }
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && matches!(site, "cross-site" | "same-site")
    {
        return Err("the request comes from another site");
    }
    Ok(())
}

/// Scripts: only the console's own inline ones, by hash.
fn csp() -> HeaderValue {
    static VALUE: std::sync::OnceLock<HeaderValue> = std::sync::OnceLock::new();
    VALUE
        .get_or_init(|| {
            let hashes: Vec<String> = script::ALL
                .iter()
                .map(|s| {
                    let hash = base64::engine::general_purpose::STANDARD
                        .encode(Sha256::digest(s.as_bytes()));
                    format!("'sha256-{hash}'")
                })
                .collect();
            let hashes = hashes.join(" ");
            let policy = format!(
                "default-src 'none'; style-src 'unsafe-inline'; script-src {hashes}; \
                 connect-src 'self'; img-src 'self' data:; form-action 'self'; \
                 frame-ancestors 'none'; base-uri 'none'"
            );
            HeaderValue::from_str(&policy)
                .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
        })
        .clone()
}
