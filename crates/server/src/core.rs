//! What the web console (`mcp-tasks-console`) is built on, and nothing more: the console
//! is a crate of its own over the replica, and everything it does that the API also does
//! goes through the API's own code, so the two cannot drift apart.
//!
//! Beside the items here, [`AppState`] lends the console its parts: the push hub
//! ([`AppState::hub`]), the open-stream counts ([`AppState::streams`]), the authenticator
//! ([`AppState::auth`]), the replica's keys ([`AppState::state_keys`]), the stores it
//! reads ([`AppState::console_reads`], [`AppState::sessions`], [`AppState::store`]) and
//! the rate limit ([`AppState::over_rate_limit`]).
//!
//! - Live streams: a console stream is an [`EventSource`] sent through the shell every
//!   SSE response of a replica shares ([`sse::response`], one event per [`sse::frame`]), kept
//!   to its viewer's [`Standing`] (checked again while open; [`Checked`], [`End`]), and
//!   counted against its owner's streams ([`StreamCounts`], [`StreamPermit`]). What it
//!   shows comes from the push hub ([`Hub::subscribe`], [`Watcher`], [`Snapshot`],
//!   [`TaskSnapshot`]; [`Hub::runnable`] for the lists).
//! - Actions: [`cancel`] and [`answer`] are `tasks/cancel`'s and `tasks/update`'s, checks
//!   included; their errors are the API's ([`RpcError`]).
//! - Requests: the DNS-rebinding defence of every HTTP surface
//!   ([`check_host_and_origin`]), and what a session cookie is made of ([`nonce`],
//!   [`time_of`], [`sse::expiry`], [`sse::sooner`]).

use mcp_tasks_store::{CancelOutcome, Owner, TaskId};
use serde_json::{Map, Value};

use crate::AppState;
use crate::params::{refuse_larger, refuse_nul};

pub use crate::error::RpcError;
pub use crate::origin::check_host_and_origin;
pub use crate::push::hub::{Hub, Snapshot, TaskSnapshot, Watcher};
pub use crate::push::streams::{StreamCounts, StreamPermit};
pub use crate::session::context::time_of;
pub use crate::session::token::nonce;
pub use crate::sse::{Checked, End, EventSource, Standing};

/// The shell every SSE response of a replica shares (see [`EventSource`] and
/// [`Standing`]), and the expiries a stream's standing is made of.
pub mod sse {
    pub use crate::sse::{Checked, End, EventSource, Standing, expiry, frame, response, sooner};
}

/// Cancels task `id` of `owner`, as `tasks/cancel` does.
pub async fn cancel(
    state: &AppState,
    owner: &Owner,
    id: TaskId,
) -> Result<CancelOutcome, RpcError> {
    crate::tasks_methods::cancel(state, owner, id).await
}

/// Applies `responses` (input request key → answer) to task `id` of `owner`, as
/// `tasks/update`'s `inputResponses` are: refused with NUL characters or over the
/// replica's size limit, then checked against the requests still outstanding.
pub async fn answer(
    state: &AppState,
    owner: &Owner,
    id: TaskId,
    responses: Map<String, Value>,
) -> Result<(), RpcError> {
    let mut params = Map::new();
    params.insert("inputResponses".into(), Value::Object(responses));
    refuse_nul(&params, "inputResponses")?;
    refuse_larger(
        &params,
        "inputResponses",
        state.config().max_input_response_bytes,
    )?;
    let Some(Value::Object(responses)) = params.get("inputResponses") else {
        return Err(RpcError::internal());
    };
    crate::answers::apply_to_task(state, owner, id, responses).await
}
