//! [`Viewer`] as an extractor: a page handler that takes one is served only to a viewer;
//! anyone else is sent to the sign-in page.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};

use super::layout;
use super::session::{NoViewer, Viewer};
use crate::Console;

impl FromRequestParts<Console> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Console) -> Result<Self, Response> {
        // Resolved already by the renewal middleware, for a session it may have renewed.
        if let Some(viewer) = parts.extensions.remove::<Self>() {
            return Ok(viewer);
        }
        match Self::resolve(state, &parts.headers).await {
            Ok(viewer) => Ok(viewer),
            Err(NoViewer::RateLimited) => Err(layout::too_many_requests()),
            Err(NoViewer::Store(unavailable)) => Err(layout::unavailable(if unavailable {
                axum::http::StatusCode::SERVICE_UNAVAILABLE
            } else {
                axum::http::StatusCode::INTERNAL_SERVER_ERROR
            })),
            Err(why) => {
                if let NoViewer::Refused(e) = &why {
                    tracing::info!(reason = %e, "console: not signed in");
                }
                Err(Redirect::to("/console/signin").into_response())
            }
        }
    }
}
