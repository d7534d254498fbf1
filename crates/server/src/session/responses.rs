//! A client's response to a request the server sent on a stream (`elicitation/create`):
//! applied to the task its id names, by whichever replica it reaches.

use axum::http::StatusCode;
use mcp_tasks_store::Owner;
use mcp_tasks_wire::ClientResponse;
use serde_json::Map;

use super::context::{Session, transport_error};
use super::token::InputRequestId;
use crate::AppState;
use crate::answers;
use crate::error::RpcError;
use crate::params::parse_task_id;
use crate::request_state::owner_digest;

pub(crate) async fn apply(
    state: &AppState,
    owner: &Owner,
    session: &Session,
    response: ClientResponse,
) -> Result<(), RpcError> {
    let id = match &response.id {
        mcp_tasks_wire::RequestId::String(id) => InputRequestId::verify(state.state_keys(), id),
        mcp_tasks_wire::RequestId::Number(_) => None,
    };
    let Some(id) =
        id.filter(|id| id.session == session.token.nonce && id.owner == owner_digest(owner))
    else {
        return Err(transport_error(
            StatusCode::BAD_REQUEST,
            "this response answers no request this server sent in this session",
        ));
    };
    let task = parse_task_id(&id.task)?;
    match response.outcome {
        Ok(result) => {
            let mut answers = Map::new();
            answers.insert(id.key.clone(), result);
            if let Err(e) = answers::apply_to_task(state, owner, task, &answers).await {
                if e.status.is_server_error() {
                    return Err(e);
                }
                // Nobody else can answer it, so the call waiting for it would wait in vain.
                cancel(state, owner, task, "its answer did not fit the request").await;
                return Err(transport_error(StatusCode::BAD_REQUEST, e.error.message));
            }
            Ok(())
        }
        Err(error) => {
            tracing::info!(task = %task, key = %id.key, code = error.code, "the client could not answer an input request");
            cancel(
                state,
                owner,
                task,
                "the client answered its input request with an error",
            )
            .await;
            Ok(())
        }
    }
}

async fn cancel(state: &AppState, owner: &Owner, task: mcp_tasks_store::TaskId, why: &str) {
    match state.store().cancel_task(owner, task).await {
        Ok(outcome) => tracing::info!(task = %task, ?outcome, reason = why, "task cancelled"),
        Err(e) => tracing::warn!(task = %task, error = %e, "could not cancel a task"),
    }
}
