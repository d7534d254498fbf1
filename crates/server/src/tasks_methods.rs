//! `tasks/get`, `tasks/update` and `tasks/cancel`.
//!
//! Each acts only within the caller's tenant and principal. A task of someone else is
//! never read, so it gets exactly the answer an id that never existed gets.

use mcp_tasks_store::{CancelOutcome, Lookup, Owner, TaskId, UpdateOutcome};
use mcp_tasks_tools::validate_input_response;
use mcp_tasks_wire::{ErrorObject, RequestMeta, codes};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::dispatch::{refuse_larger, refuse_nul, string_param};
use crate::error::RpcError;

pub(crate) async fn handle(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    // Capability first: a client that did not declare the extension learns nothing
    // about any task id.
    if !meta.client_capabilities.declares_tasks() {
        return Err(RpcError::method(ErrorObject::tasks_extension_required()));
    }
    let id = parse_task_id(string_param(params, "taskId")?)?;
    let store = state.store();
    match method {
        "tasks/get" => {
            let task = found(store.get_task(owner, id).await?)?;
            Ok(task.view().get_result())
        }
        "tasks/update" => {
            refuse_nul(params, "inputResponses")?;
            refuse_larger(
                params,
                "inputResponses",
                state.config().max_input_response_bytes,
            )?;
            let responses = match params.get("inputResponses") {
                Some(Value::Object(r)) => r,
                Some(_) => {
                    return Err(RpcError::invalid_params(
                        "params.inputResponses must be an object",
                    ));
                }
                None => {
                    return Err(RpcError::invalid_params(
                        "params.inputResponses is required",
                    ));
                }
            };
            apply_answers(state, owner, id, responses).await?;
            Ok(ack())
        }
        "tasks/cancel" => {
            let outcome = found(store.cancel_task(owner, id).await?)?;
            tracing::info!(task = %id, ?outcome, "cancel");
            if outcome == CancelOutcome::Requested {
                tracing::debug!(task = %id, "running task flagged; its worker will stop it");
            }
            Ok(ack())
        }
        _ => Err(RpcError::protocol(ErrorObject::method_not_found(method))),
    }
}

/// Applies answers to a task's outstanding input requests (before returning, so the next
/// `tasks/get` shows them), and wakes the workers when nothing is left outstanding.
pub(crate) async fn apply_answers(
    state: &AppState,
    owner: &Owner,
    id: TaskId,
    responses: &Map<String, Value>,
) -> Result<(), RpcError> {
    let outcome = found(
        state
            .store()
            .update_inputs(owner, id, responses, |_key, request, response| {
                validate_input_response(request, response)
            })
            .await?,
    )?;
    match outcome {
        Ok(UpdateOutcome::Applied { keys, resumed }) => {
            if resumed {
                state.wake_workers();
            }
            tracing::info!(task = %id, answered = keys.len(), resumed, "input applied");
            Ok(())
        }
        Ok(UpdateOutcome::Ignored) => {
            tracing::debug!(task = %id, "no outstanding key answered; update ignored");
            Ok(())
        }
        Err(invalid) => Err(invalid_answer(&invalid.key, &invalid.reason)),
    }
}

/// An answer that does not fit the request it answers.
pub(crate) fn invalid_answer(key: &str, reason: &str) -> RpcError {
    RpcError::method(
        ErrorObject::new(
            codes::INVALID_PARAMS,
            format!("Invalid input response for {key:?}: {reason}"),
        )
        .with_data(json!({ "key": key })),
    )
}

fn ack() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("resultType".into(), json!("complete"));
    m
}

/// Only ids of the exact form this server issues are looked up.
pub(crate) fn parse_task_id(raw: &str) -> Result<TaskId, RpcError> {
    TaskId::parse(raw).ok_or_else(|| {
        RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Invalid task id (not an id this server issues)",
        ))
    })
}

pub(crate) fn found<T>(lookup: Lookup<T>) -> Result<T, RpcError> {
    match lookup {
        Lookup::Found(t) => Ok(t),
        Lookup::Expired => Err(RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Task has expired",
        ))),
        Lookup::NotFound => Err(RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Task not found",
        ))),
    }
}
