//! Reading the console's form posts: bounded in size and time, and checked for the
//! session's CSRF token before anything else looks at them.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::layout;
use super::session::Viewer;
use mcp_tasks_server::AppState;

/// Largest form body: an answer's fields, comfortably; nothing a person types is larger.
pub(crate) const MAX_FORM_BYTES: usize = 64 * 1024;

/// The fields of a form post, in order.
#[derive(Debug, Default)]
pub(crate) struct Form {
    fields: Vec<(String, String)>,
}

impl Form {
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads an `application/x-www-form-urlencoded` body of at most [`MAX_FORM_BYTES`].
    pub(crate) async fn read(state: &AppState, body: Body) -> Result<Self, Response> {
        let timeout = state.config().connections.body_timeout;
        let read = tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_FORM_BYTES)).await;
        let bytes = match read {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e))
                if std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) =>
            {
                return Err(layout::bad_request(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the form is larger than {MAX_FORM_BYTES} bytes"),
                ));
            }
            Ok(Err(_)) => {
                return Err(layout::bad_request(
                    StatusCode::BAD_REQUEST,
                    "the form could not be read in full",
                ));
            }
            Err(_) => {
                return Err(layout::bad_request(
                    StatusCode::REQUEST_TIMEOUT,
                    "the form did not arrive in time",
                ));
            }
        };
        let fields = url::form_urlencoded::parse(&bytes)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Ok(Self { fields })
    }

    /// Reads the form of `viewer` and refuses it (403) without the session's CSRF token.
    pub(crate) async fn read_checked(
        state: &AppState,
        viewer: &Viewer,
        body: Body,
    ) -> Result<Self, Response> {
        let form = Self::read(state, body).await?;
        if !viewer.csrf_matches(state, form.get("csrf")) {
            tracing::info!("console action refused: no valid CSRF token");
            return Err(layout::forbidden(
                "this form has no valid CSRF token; reload the page and try again",
            ));
        }
        Ok(form)
    }
}
