//! The page every console view is drawn in (navigation, who is signed in, sign-out), and
//! the error pages.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::session::Viewer;

/// Plain, readable without any script or stylesheet fetch.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24}\
header{display:flex;gap:1.5em;align-items:center;padding:.6em 1.2em;background:#24292f;color:#fff}\
header a{color:#fff}header form{margin-left:auto}main{padding:1em 1.2em;max-width:70em}\
table{border-collapse:collapse}td,th{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}\
pre{background:#f6f8fa;padding:.6em;overflow:auto;max-height:30em}\
.status{font-weight:600}form.task-answer{border:1px solid #ccc;padding:.6em;margin:.6em 0}\
label{display:block;margin:.3em 0}.error{color:#b00}";

/// A whole page for `viewer`, titled `title`.
pub(crate) fn page(viewer: &Viewer, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mcp-tasks console" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "mcp-tasks" }
                    nav {
                        a href="/console/tasks" { "Tasks" } " "
                        a href="/console/inbox" { "Inbox" } " "
                        a href="/console/health" { "Health" }
                    }
                    span #viewer { (viewer.label()) }
                    form #signout method="post" action="/console/signout" {
                        input type="hidden" name="csrf" value=(viewer.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page without navigation (sign-in, errors before anyone is known).
pub(crate) fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mcp-tasks console" }
                style { (PreEscaped(STYLE)) }
            }
            body { main { (body) } }
        }
    }
}

/// An HTML answer with `status`.
pub(crate) fn respond(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// The one answer for a task that is unknown, malformed, someone else's or another
/// tenant's: nothing in it depends on which (the id is not echoed either).
pub(crate) fn not_found(viewer: &Viewer) -> Response {
    respond(
        StatusCode::NOT_FOUND,
        page(
            viewer,
            "Not found",
            html! {
                h1 #not-found { "Not found" }
                p { "There is no task with this id that you can see." }
                p { a href="/console/tasks" { "Back to the tasks" } }
            },
        ),
    )
}

/// A refused action (403): a missing or wrong CSRF token, a foreign origin, or an action
/// the viewer may not take.
pub(crate) fn forbidden(reason: &str) -> Response {
    respond(
        StatusCode::FORBIDDEN,
        bare(
            "Forbidden",
            html! {
                h1 #forbidden { "Forbidden" }
                p .error { (reason) }
                p { a href="/console/tasks" { "Back to the console" } }
            },
        ),
    )
}

/// A request the console cannot use (400, 413), with what was wrong.
pub(crate) fn bad_request(status: StatusCode, reason: &str) -> Response {
    respond(
        status,
        bare(
            "Bad request",
            html! {
                h1 #bad-request { "That did not work" }
                p .error #error-message { (reason) }
                p { a href="/console/tasks" { "Back to the tasks" } }
            },
        ),
    )
}

pub(crate) fn too_many_requests() -> Response {
    let mut response = respond(
        StatusCode::TOO_MANY_REQUESTS,
        bare(
            "Too many requests",
            html! { h1 { "Too many requests" } p { "Wait a moment and reload." } },
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1));
    response
}

/// The database could not be reached, or failed (503 or 500).
pub(crate) fn unavailable(status: StatusCode) -> Response {
    let mut response = respond(
        status,
        bare(
            "Unavailable",
            html! { h1 { "The task store is unavailable" } p { "Reload in a moment." } },
        ),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(1));
    }
    response
}

/// A store failure as a page (logged where `RpcError` logs it).
pub(crate) fn store_error(e: mcp_tasks_store::StoreError) -> Response {
    let e = mcp_tasks_server::core::RpcError::from(e);
    unavailable(if e.status == StatusCode::SERVICE_UNAVAILABLE {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    })
}
