//! Signing in (a pasted bearer token, or OAuth: see `oauth`) and out.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::form::Form;
use super::layout;
use super::session::{MAX_TOKEN_BYTES, NoViewer, Session, Viewer, clear_cookie, sign_in};
use mcp_tasks_server::AppState;

use crate::Console;

/// `GET /console/signin`: straight on to the tasks when the request already has a viewer
/// (signed in, or an authenticator that needs no token), else the sign-in form. Either
/// way the browser leaves with a session cookie, whose CSRF token the form carries.
pub(crate) async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let existing = Session::from_headers(&state, &headers);
    let fresh = existing.is_none();
    let session = existing.unwrap_or_else(|| Session::new(&state, None));
    let mut response = match Viewer::with_session(&state, &headers, session.clone()).await {
        Ok(_) => Redirect::to("/console/tasks").into_response(),
        Err(NoViewer::RateLimited) => return layout::too_many_requests(),
        Err(_) => layout::respond(StatusCode::OK, signin_form(&state, &session, None)),
    };
    if fresh {
        response
            .headers_mut()
            .insert(header::SET_COOKIE, session.set_cookie(&state));
    }
    response
}

/// The sign-in page saying why the session has ended (its renewal failed), with a new
/// session (and so a CSRF token) for signing in again.
pub(crate) fn ended(state: &AppState, why: &str) -> Response {
    let session = Session::new(state, None);
    let mut response = layout::respond(
        StatusCode::UNAUTHORIZED,
        signin_form(state, &session, Some(why)),
    );
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session.set_cookie(state));
    response
}

/// The sign-in page, with `error` when a token was just refused.
fn signin_form(state: &AppState, session: &Session, error: Option<&str>) -> Markup {
    let oauth = super::oauth::available(state);
    layout::bare(
        "Sign in",
        html! {
            h1 { "Sign in to the mcp-tasks console" }
            @if let Some(error) = error {
                p .error #signin-error { (error) }
            }
            @if oauth {
                p { a #signin-oauth href="/console/oauth/start" { "Sign in with your authorization server" } }
                p { "or paste a bearer token:" }
            }
            form #signin-token method="post" action="/console/signin" {
                input type="hidden" name="csrf" value=(session.csrf(state));
                label {
                    "Bearer token "
                    input type="password" name="token" autocomplete="off" required size="60";
                }
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// `POST /console/signin`: a pasted token, verified by the API's authenticator before it
/// goes into a new session.
pub(crate) async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(session) = Session::from_headers(&state, &headers) else {
        return layout::forbidden("no session: open the sign-in page first");
    };
    let form = match Form::read(&state, body).await {
        Ok(form) => form,
        Err(response) => return response,
    };
    if !form
        .get("csrf")
        .is_some_and(|t| session.csrf_matches(&state, t))
    {
        return layout::forbidden(
            "this form has no valid CSRF token; reload the page and try again",
        );
    }
    let token = form.get("token").unwrap_or_default().trim();
    let refuse = |why: &str| {
        layout::respond(
            StatusCode::UNAUTHORIZED,
            signin_form(&state, &session, Some(why)),
        )
    };
    if token.is_empty() {
        return refuse("paste a bearer token");
    }
    if token.len() > MAX_TOKEN_BYTES {
        return refuse(&format!("the token is longer than {MAX_TOKEN_BYTES} bytes"));
    }
    let signed_in = Session::new(&state, Some(token.to_owned()));
    sign_in(&state, &headers, signed_in, || {
        Redirect::to("/console/tasks").into_response()
    })
    .await
    .unwrap_or_else(|why| refuse(&why))
}

/// `POST /console/signout`: the session is ended for every replica and its cookie deleted
/// (the bearer token itself stays valid until it expires, as any bearer token does; a
/// refresh token is revoked at the authorization server when it offers revocation).
pub(crate) async fn signout(
    State(state): State<Console>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(session) = Session::from_headers(&state, &headers) else {
        return Redirect::to("/console/signin").into_response();
    };
    let form = match Form::read(&state, body).await {
        Ok(form) => form,
        Err(response) => return response,
    };
    if !form
        .get("csrf")
        .is_some_and(|t| session.csrf_matches(&state, t))
    {
        return layout::forbidden(
            "this form has no valid CSRF token; reload the page and try again",
        );
    }
    // Ended for every replica, by the cookie's own session, whoever its token names
    // (expired or not; whatever the rate limit or the session's state): a copy of the
    // cookie elsewhere must not live on, nor renew itself with its refresh token.
    match session.owner(&state, &headers).await {
        Some(owner) => {
            if let Err(e) = session.revoke(&state, &owner).await {
                return layout::store_error(e);
            }
            tracing::info!(tenant = %owner.tenant, principal = %owner.principal, "console: signed out");
        }
        // No token that names anyone (never signed in): nothing it could open.
        None => tracing::debug!("console: signed out a session that names nobody"),
    }
    super::oauth::revoke_at_server(&state, &session).await;
    let mut response = Redirect::to("/console/signin").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, clear_cookie(&state));
    response
}
