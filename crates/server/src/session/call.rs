//! `tools/call` in a 2025-era session.
//!
//! The same checks and the same task as for any client (`tools_call::start`), answered
//! the 2025 way:
//! - a sync-only tool: its result, as JSON;
//! - a task-optional tool: the task runs and the call waits for it on an SSE response
//!   (see `stream`), with progress and the task's input requests sent to the client;
//! - at 2025-11-25, a call with a `task` param: the task is created and returned
//!   (`CreateTaskResult`), for the client to poll with the experimental tasks methods;
//! - a task-required tool without a `task` param: refused with -32601, as 2025-11-25
//!   prescribes (earlier revisions cannot create tasks at all).

use axum::http::HeaderMap;
use mcp_tasks_store::Owner;
use mcp_tasks_tools::ExecutionPolicy;
use mcp_tasks_wire::{ErrorObject, Request, TASKS_EXTENSION, codes};
use serde_json::{Map, Value, json};

use super::context::{Session, progress_token};
use super::shapes;
use super::stream::{self, Opener, Purpose};
use crate::AppState;
use crate::error::RpcError;
use crate::params::{idempotency_key, string_param};
use crate::push::streams;
use crate::reply::Reply;
use crate::tools_call::{self, Started};
use crate::trace;

pub(crate) async fn call(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    session: &Session,
    request: Request,
) -> Result<Reply, RpcError> {
    let mut params = request.params;
    // MRTR belongs to 2026-07-28; a session answers input on the call's stream instead.
    params.remove("requestState");
    params.remove("inputResponses");
    let name = string_param(&params, "name")?.to_owned();
    let registry = state.registry();
    let tool = registry
        .get(&name)
        .ok_or_else(|| RpcError::invalid_params(format!("unknown tool {name:?}")))?;
    let as_task = session.revision.has_tasks() && params.get("task").is_some_and(Value::is_object);
    match (tool.policy, as_task) {
        (ExecutionPolicy::SyncOnly, true) => {
            return Err(RpcError::method(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!(
                    "Tool {name:?} does not run as a task (its execution.taskSupport is forbidden); call it without \"task\""
                ),
            )));
        }
        (ExecutionPolicy::TaskRequired, false) => {
            let how = if session.revision.has_tasks() {
                "call it with a \"task\" param (execution.taskSupport is required)".to_owned()
            } else {
                format!(
                    "protocol {} has no tasks; connect with 2025-11-25, or 2026-07-28 with the {TASKS_EXTENSION} extension",
                    session.revision
                )
            };
            return Err(RpcError::method(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!("Tool {name:?} runs only as a task: {how}"),
            )));
        }
        _ => {}
    }

    // A task-optional tool not run as a task is answered on a stream: its place among
    // the principal's open streams is taken before any task exists.
    let permit = if tool.policy == ExecutionPolicy::TaskOptional && !as_task {
        Some(streams::permit(
            state.streams(),
            owner,
            state.config().max_streams_per_principal,
        )?)
    } else {
        None
    };
    let mut meta = session.meta(&params);
    if as_task {
        // The client asked for a task: to the shared path that is what declaring the
        // Tasks extension means.
        meta.client_capabilities
            .0
            .insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
    }
    let trace = trace::for_request(headers);
    let key = idempotency_key(headers)?;
    match tools_call::start(state, owner, &meta, &params, trace, key).await? {
        Started::Answered(result) => {
            if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
                return Err(RpcError::method(ErrorObject::new(
                    codes::INVALID_REQUEST,
                    format!(
                        "Tool {name:?} needs input before it can start, which a {} session cannot provide; use protocol 2026-07-28",
                        session.revision
                    ),
                )));
            }
            Ok(Reply::Result(Value::Object(shapes::result(result))))
        }
        Started::Task { task, .. } if as_task => {
            tracing::info!(task = %task.id, tool = %name, "task created for a 2025-11-25 session");
            let mut result = Map::new();
            result.insert(
                "task".into(),
                Value::Object(shapes::task(&task.view().detailed())),
            );
            Ok(Reply::Result(Value::Object(result)))
        }
        Started::Task {
            task, retryable, ..
        } => {
            let purpose = Purpose::Call {
                progress_token: progress_token(&params),
                retryable,
            };
            let permit = match permit {
                Some(permit) => permit,
                None => streams::permit(
                    state.streams(),
                    owner,
                    state.config().max_streams_per_principal,
                )?,
            };
            let opener = Opener {
                owner,
                headers,
                session,
            };
            let response =
                stream::open(state, opener, permit, request.id, task.id, purpose).await?;
            Ok(Reply::Stream(response))
        }
    }
}
