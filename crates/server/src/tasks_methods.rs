//! `tasks/get`, `tasks/update` and `tasks/cancel`.
//!
//! Each acts only within the caller's tenant and principal. A task of someone else is
//! never read, so it gets exactly the answer an id that never existed gets.

use mcp_tasks_store::{CancelOutcome, Owner, TaskId};
use mcp_tasks_wire::{ErrorObject, RequestMeta};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::answers;
use crate::error::RpcError;
use crate::params::{
    found, parse_task_id, refuse_larger, refuse_nul, required_input_responses, string_param,
};
use crate::reply::Reply;

/// The task methods, each named once in `dispatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskMethod {
    Get,
    Update,
    Cancel,
}

pub(crate) async fn handle(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    method: TaskMethod,
    params: &Map<String, Value>,
) -> Result<Reply, RpcError> {
    // Capability first: a client that did not declare the extension learns nothing
    // about any task id.
    if !meta.client_capabilities.declares_tasks() {
        return Err(RpcError::method(ErrorObject::tasks_extension_required()));
    }
    let id = parse_task_id(string_param(params, "taskId")?)?;
    let store = state.store();
    match method {
        TaskMethod::Get => {
            // Only the columns the answer shows, its stored JSON copied in unparsed.
            let view = found(store.get_view(owner, id).await?)?;
            Ok(Reply::Serialized(
                view.get_result_json(&state.config().server_info),
            ))
        }
        TaskMethod::Update => {
            refuse_nul(params, "inputResponses")?;
            refuse_larger(
                params,
                "inputResponses",
                state.config().max_input_response_bytes,
            )?;
            let responses = required_input_responses(params)?;
            answers::apply_to_task(state, owner, id, responses).await?;
            Ok(ack(state))
        }
        TaskMethod::Cancel => {
            cancel(state, owner, id).await?;
            Ok(ack(state))
        }
    }
}

/// Cancels task `id` of `owner`: `tasks/cancel`, and the console's cancel button.
pub(crate) async fn cancel(
    state: &AppState,
    owner: &Owner,
    id: TaskId,
) -> Result<CancelOutcome, RpcError> {
    let outcome = found(state.store().cancel_task(owner, id).await?)?;
    tracing::info!(task = %id, ?outcome, "cancel");
    if outcome == CancelOutcome::Requested {
        tracing::debug!(task = %id, "running task flagged; its worker will stop it");
    }
    Ok(outcome)
}

fn ack(state: &AppState) -> Reply {
    let mut m = Map::new();
    m.insert("resultType".into(), json!("complete"));
    state.config().server_info.stamp(&mut m, "complete");
    Reply::Result(Value::Object(m))
}
