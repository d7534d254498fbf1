//! Applying a client's answers to input requests: to a stored task (`tasks/update`, and a
//! `tools/call` that resumes a task run for a client without the Tasks extension), or to
//! an MRTR round before any task exists.

use mcp_tasks_store::{Owner, TaskId, UpdateOutcome};
use mcp_tasks_tools::validate_input_response;
use mcp_tasks_wire::{ErrorObject, codes};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::RpcError;
use crate::params::{found, optional_input_responses};

/// Applies answers to a task's outstanding input requests (before returning, so the next
/// `tasks/get` shows them), and wakes the workers when nothing is left outstanding.
pub(crate) async fn apply_to_task(
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
                state.wake_workers(&owner.tenant);
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

/// The optional `inputResponses` of a `tools/call` that resumes a task, applied to it;
/// without any, the task is left as it is.
pub(crate) async fn apply_params_to_task(
    state: &AppState,
    owner: &Owner,
    id: TaskId,
    params: &Map<String, Value>,
) -> Result<(), RpcError> {
    match optional_input_responses(params)? {
        Some(responses) => apply_to_task(state, owner, id, responses).await,
        None => Ok(()),
    }
}

/// Adds the optional `inputResponses` of an MRTR round to the answers gathered so far.
/// Answers to requests the round did not make are ignored.
pub(crate) fn gather_for_round(
    params: &Map<String, Value>,
    pending: &Map<String, Value>,
    answers: &mut Map<String, Value>,
) -> Result<(), RpcError> {
    let Some(responses) = optional_input_responses(params)? else {
        return Ok(());
    };
    for (key, response) in responses {
        let Some(request) = pending.get(key) else {
            continue;
        };
        validate_input_response(request, response)
            .map_err(|reason| invalid_answer(key, &reason))?;
        answers.insert(key.clone(), response.clone());
    }
    Ok(())
}

/// An answer that does not fit the request it answers.
fn invalid_answer(key: &str, reason: &str) -> RpcError {
    RpcError::method(
        ErrorObject::new(
            codes::INVALID_PARAMS,
            format!("Invalid input response for {key:?}: {reason}"),
        )
        .with_data(json!({ "key": key })),
    )
}
