//! `GET /console/health/events`: the health page's live part, as SSE. Each event is the
//! page's content rendered again for its viewer (`{"html": ...}`), sent when it changed.
//!
//! Health is figures over many tasks, not one task's versions, so the stream does not
//! watch tasks: it reads the figures again when the push hub hears the workers' wake-up
//! for the viewer's tenant (a task of it was created, resumed or released somewhere;
//! coalesced, at most once a second per stream) or a resync, and every [`BACKSTOP`]
//! whatever happens, since ages grow and workers fall silent without any notification.
//! A read costs the page's own bounded index reads, several statements; when nothing
//! changed nothing is sent. Since every read costs that much, a principal may hold
//! fewer of these open than of other streams (`streams::MAX_HEALTH_STREAMS`).

use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use serde_json::json;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::health;
use super::layout;
use super::live::Requery;
use super::session::Viewer;
use super::standing::Signed;
use mcp_tasks_server::AppState;
use mcp_tasks_server::core::StreamPermit;
use mcp_tasks_server::core::sse::{self, EventSource};

/// How often the figures are read again when nothing said to.
pub(super) const BACKSTOP: Duration = Duration::from_secs(10);

pub(crate) async fn events(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
) -> Response {
    let standing = Signed::new(&headers, &viewer);
    let Some(permit) = state
        .streams()
        .try_open_health(&viewer.owner, state.config().max_streams_per_principal)
    else {
        return layout::too_many_requests();
    };
    let source = LiveHealth {
        requery: Requery::new(&state, &viewer.owner.tenant, BACKSTOP),
        shutdown: Box::pin(state.shutdown().clone().cancelled_owned()),
        state: state.clone(),
        viewer,
        sent: None,
        _permit: permit,
    };
    sse::response(&state, source, standing)
}

struct LiveHealth {
    state: AppState,
    viewer: Viewer,
    requery: Requery,
    /// The rendering last sent.
    sent: Option<String>,
    shutdown: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    _permit: StreamPermit,
}

impl EventSource for LiveHealth {
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            tokio::select! {
                () = self.shutdown.as_mut() => return None,
                () = self.requery.due() => {}
            }
            let html = match health::content(&self.state, &self.viewer).await {
                Ok(content) => content.into_string(),
                Err(e) => {
                    // The next read tries again; the page keeps what it shows.
                    tracing::debug!(error = %e, "console: could not read the health figures again");
                    continue;
                }
            };
            if self.sent.as_ref() != Some(&html) {
                let event = json!({ "html": html });
                self.sent = Some(html);
                return Some(sse::frame(&event));
            }
        }
    }
}
