//! `tools/call`: validate, gather MRTR input, then run in the replica (sync-only tools)
//! or create a durable task for the workers.
//!
//! The server alone decides whether a call becomes a task:
//! - sync-only tools run here and answer directly;
//! - task tools become a task when the request declared the Tasks extension;
//! - a task-optional tool called without the extension still runs as a task, and this
//!   replica waits for its result (bounded) so the client gets an ordinary answer;
//! - a task-required tool called without the extension is refused with `-32021`.

use mcp_tasks_store::{
    Created, Idempotency, NewTask, Owner, Placement, ReplicaStore, TaskId, TaskRecord,
};
use mcp_tasks_tools::scheduling::PRIORITY_META_KEY;
use mcp_tasks_tools::{ExecutionPolicy, Outcome, Tool, ToolContext, ToolError};
use mcp_tasks_wire::results::input_required_result;
use mcp_tasks_wire::{ErrorObject, RequestMeta, TaskStatus, codes};
use serde_json::{Map, Value, json};
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::AppState;
use crate::answers::apply_params_to_task;
use crate::error::RpcError;
use crate::mrtr::{self, Earlier, Round, ensure_client_can_answer, millis};
use crate::params::{parse_task_id, refuse_larger, refuse_nul, string_param};
use crate::push::hub::Snapshot;
use crate::request_state::{StateKind, value_digest};

pub(crate) async fn call(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    params: &Map<String, Value>,
    trace_context: Value,
    idempotency_key: Option<String>,
) -> Result<Map<String, Value>, RpcError> {
    match start(state, owner, meta, params, trace_context, idempotency_key).await? {
        Started::Answered(result) => Ok(result),
        Started::Task {
            tool,
            task,
            retryable,
        } => {
            if meta.client_capabilities.declares_tasks() {
                return Ok(task.view().create_result());
            }
            wait_for_result(state, owner, meta, &tool, task.id, retryable).await
        }
    }
}

/// What [`start`] made of a call.
pub(crate) enum Started {
    /// Answered without a new task: a sync-only tool's result, an MRTR round, or the end
    /// of a wait that an earlier round began.
    Answered(Map<String, Value>),
    /// A task runs the call (with an `Idempotency-Key`, perhaps one that already did).
    Task {
        tool: Box<Tool>,
        task: Box<TaskRecord>,
        /// The call carried an `Idempotency-Key`, so a client can pick the task up again.
        retryable: bool,
    },
}

/// Checks a call and either answers it or creates the task that runs it; waiting for the
/// task, or handing it to the client, is the caller's part.
pub(crate) async fn start(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    params: &Map<String, Value>,
    trace_context: Value,
    idempotency_key: Option<String>,
) -> Result<Started, RpcError> {
    let name = string_param(params, "name")?;
    let registry = state.registry();
    let tool = registry
        .get(name)
        .cloned()
        .ok_or_else(|| RpcError::invalid_params(format!("unknown tool {name:?}")))?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "params.arguments must be an object",
            ));
        }
    };
    refuse_nul(params, "arguments")?;
    refuse_nul(params, "inputResponses")?;
    let lowered = lowered_priority(params)?;
    refuse_larger(params, "arguments", state.config().max_argument_bytes)?;
    refuse_larger(
        params,
        "inputResponses",
        state.config().max_input_response_bytes,
    )?;
    registry
        .validate_arguments(name, &arguments)
        .map_err(|reason| {
            RpcError::invalid_params(format!("invalid arguments for tool {name:?}: {reason}"))
        })?;

    let caps = &meta.client_capabilities;
    if let Some(required) = &tool.required_capabilities
        && !caps.satisfies(required)
    {
        return Err(RpcError::method(ErrorObject::missing_capability(
            format!("Tool {name:?} requires client capabilities this request did not declare"),
            required.clone(),
        )));
    }
    // A tool that may ask for input the client could not give is refused now, before a
    // task exists, rather than left waiting for an answer that cannot come.
    let mut missing = Map::new();
    for kind in &tool.input_kinds {
        let (method, probe) = kind.probe();
        if !caps.can_answer(method, Some(&probe)) {
            merge(&mut missing, kind.capability());
        }
    }
    if !missing.is_empty() {
        return Err(RpcError::method(ErrorObject::missing_capability(
            format!("Tool {name:?} may ask for input of a kind this request did not declare"),
            Value::Object(missing),
        )));
    }
    let declares_tasks = caps.declares_tasks();
    if tool.policy == ExecutionPolicy::TaskRequired && !declares_tasks {
        return Err(RpcError::method(ErrorObject::tasks_extension_required()));
    }

    let round = Round::new(None, &tool.name, &arguments);
    let answers = match round.earlier(state, owner, params)? {
        Earlier::First => Map::new(),
        Earlier::Pre(answers) => answers,
        Earlier::Task(id) => {
            let id = parse_task_id(&id)?;
            apply_params_to_task(state, owner, id, params).await?;
            return wait_for_result(state, owner, meta, &tool, id, false)
                .await
                .map(Started::Answered);
        }
    };

    if tool.policy == ExecutionPolicy::SyncOnly {
        return run_here(state, owner, meta, &tool, &arguments, answers)
            .await
            .map(Started::Answered);
    }
    if let Err(requests) = tool.preflight(&arguments, &answers) {
        return round
            .ask(state, owner, meta, answers, requests)
            .map(Started::Answered);
    }

    let limit = state.config().max_tasks_in_flight;
    // 0 (or less) turns the limit off, as for the rate limit.
    let checked_limit = (limit > 0).then_some(limit);
    // With a key, a client that lost its answer calls again and finds the same task.
    let retryable = idempotency_key.is_some();
    let idempotency = idempotency_key.map(|key| Idempotency {
        key,
        request_digest: value_digest(&json!({ "tool": tool.name, "arguments": arguments })),
    });
    let scheduling = &state.config().scheduling;
    let placement = Placement {
        weight: scheduling.weight(&owner.tenant),
        rounds_ahead: scheduling.rounds_ahead(
            &owner.tenant,
            &tool.name,
            tool.group.as_deref(),
            lowered,
        ),
        fifo: scheduling.is_fifo(),
    };
    let created = state
        .store()
        .create_placed(
            owner,
            NewTask {
                tool: tool.name.clone(),
                arguments,
                status_message: Some("Queued; waiting for a worker".into()),
                ttl_ms: tool.ttl.map(millis),
                poll_interval_ms: Some(millis(tool.poll_interval)),
                retention_ms: millis(state.config().retention),
                max_attempts: i32::try_from(tool.max_attempts).unwrap_or(i32::MAX),
                input_responses: answers,
                trace_context: Some(trace_context),
                client_capabilities: Some(input_capabilities(caps)),
                idempotency,
            },
            checked_limit,
            placement,
        )
        .await?;
    let task = match created {
        Created::New(task) => {
            state.wake_workers(&owner.tenant);
            tracing::info!(task = %task.id, tool = %tool.name, "task created");
            task
        }
        Created::Existing(task) => {
            tracing::info!(task = %task.id, tool = %tool.name, "idempotent retry: the task exists already");
            task
        }
        Created::KeyConflict => {
            return Err(RpcError::invalid_params(
                "the Idempotency-Key was already used with a different request (tool or arguments)",
            ));
        }
        Created::LimitReached => {
            return Err(RpcError {
                error: ErrorObject::invalid_request(format!(
                    "too many unfinished tasks for this principal (limit {limit}); wait for some to finish or cancel them"
                ))
                .with_data(json!({ "limit": "tasks_in_flight", "max": limit })),
                status: axum::http::StatusCode::TOO_MANY_REQUESTS,
                retry_after: Some(1),
            });
        }
    };
    Ok(Started::Task {
        tool: Box::new(tool),
        task: Box::new(task),
        retryable,
    })
}

/// Merges a `ClientCapabilities`-shaped object into `into`, one level deep.
fn merge(into: &mut Map<String, Value>, add: Value) {
    let Value::Object(add) = add else { return };
    for (k, v) in add {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// The part of the client's capabilities that says what input it can give, kept with
/// the task for a run that asks for input while holding it (an upstream's request).
fn input_capabilities(caps: &mcp_tasks_wire::ClientCapabilities) -> Value {
    Value::Object(
        caps.0
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "elicitation" | "sampling" | "roots"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// Runs a sync-only tool inside this replica.
async fn run_here(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    tool: &Tool,
    arguments: &Value,
    answers: Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let cancel = state.shutdown().child_token();
    let trace_context = mcp_tasks_observe::otel::span_context(&tracing::Span::current())
        .map(|c| c.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
        .unwrap_or_default();
    let ctx = ToolContext::builder(arguments.clone())
        .responses(answers.clone())
        .trace_context(trace_context)
        .client_capabilities(meta.client_capabilities.clone())
        .owner(&owner.tenant, &owner.principal)
        .cancellation(cancel.clone())
        .build();
    // Its own task, so a panicking handler costs one error response, not the replica.
    // Aborted when this request ends (answered, timed out, or the client went away), and
    // tracked, so the replica never exits with a handler still running.
    let mut run = AbortOnDropHandle::new(
        state
            .tracker()
            .spawn(tracing::Instrument::in_current_span(tool.run(ctx))),
    );
    let limit = state.config().sync_tool_timeout;
    let outcome = match tokio::time::timeout(limit, &mut run).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(join)) => {
            tracing::error!(tool = %tool.name, error = %join, "tool handler panicked");
            return Err(RpcError::internal());
        }
        Err(_) => {
            cancel.cancel();
            return Err(RpcError::method(ErrorObject::new(
                codes::INTERNAL_ERROR,
                format!(
                    "Tool {:?} did not finish within {} s",
                    tool.name,
                    limit.as_secs()
                ),
            )));
        }
    };
    match outcome {
        Ok(Outcome::Complete(result)) => Ok(as_map(
            state.config().server_info.stamped_call_tool_result(result),
        )),
        Ok(Outcome::NeedInput(requests)) => {
            Round::new(None, &tool.name, arguments).ask(state, owner, meta, answers, requests)
        }
        Ok(Outcome::Cancelled) | Err(ToolError::Interrupted) => {
            Err(RpcError::method(ErrorObject::new(
                codes::INTERNAL_ERROR,
                "The tool stopped before producing a result",
            )))
        }
        Err(ToolError::Protocol(e)) => Err(RpcError::method(e)),
    }
}

fn as_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert(
                "content".into(),
                json!([{ "type": "text", "text": other.to_string() }]),
            );
            m
        }
    }
}

/// Cancels the task if the wait is abandoned (the client went away, or gave up) before
/// the task finished: nobody could ever read its result.
pub(crate) struct CancelOnDrop {
    store: ReplicaStore,
    /// The replica's tracker: the cancellation is written before the replica exits.
    tracker: TaskTracker,
    owner: Owner,
    id: TaskId,
    armed: bool,
}

impl CancelOnDrop {
    pub(crate) fn new(state: &AppState, owner: &Owner, id: TaskId, armed: bool) -> Self {
        Self {
            store: state.store().clone(),
            tracker: state.tracker().clone(),
            owner: owner.clone(),
            id,
            armed,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, owner, id) = (self.store.clone(), self.owner.clone(), self.id);
        // Dropped outside a runtime there is nothing to spawn on; the task then expires.
        if tokio::runtime::Handle::try_current().is_ok() {
            self.tracker.spawn(async move {
                match store.cancel_task(&owner, id).await {
                    Ok(outcome) => tracing::info!(task = %id, ?outcome, "abandoned synchronous call: task cancelled"),
                    Err(e) => tracing::warn!(task = %id, error = %e, "could not cancel an abandoned task"),
                }
            });
        }
    }
}

/// Waits for a task on behalf of a client that cannot poll it.
///
/// If the wait is abandoned the task is cancelled, since nobody could read its result;
/// unless the call carried an `Idempotency-Key` (`retryable`), in which case the client
/// can call again and pick the task up. When the replica shuts down, waits go on for
/// `drain_grace` and then answer 503, so clients retry on another replica.
async fn wait_for_result(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    tool: &Tool,
    id: TaskId,
    retryable: bool,
) -> Result<Map<String, Value>, RpcError> {
    let mut guard = CancelOnDrop::new(state, owner, id, !retryable);
    let mut deadline = tokio::time::Instant::now() + state.config().sync_wait;
    let mut draining = false;
    // The hub tells us about every change to the task, read once for all who wait on it.
    let mut watcher = match state.hub().subscribe(owner, &[id]).await?.pop() {
        Some(w) => w,
        None => {
            guard.disarm();
            return Err(RpcError::method(ErrorObject::new(
                codes::INTERNAL_ERROR,
                "The task running this call no longer exists",
            )));
        }
    };
    loop {
        let snapshot = watcher.rx.borrow_and_update().clone();
        if let Snapshot::Task(current) = &snapshot {
            let detailed = &current.detailed;
            match current.status {
                TaskStatus::Completed => {
                    guard.disarm();
                    let result = detailed
                        .get("result")
                        .cloned()
                        .unwrap_or_else(|| json!({ "content": [] }));
                    return Ok(as_map(result));
                }
                TaskStatus::Failed => {
                    guard.disarm();
                    let error = detailed
                        .get("error")
                        .and_then(|e| serde_json::from_value(e.clone()).ok())
                        .unwrap_or_else(ErrorObject::internal);
                    return Err(RpcError::method(error));
                }
                TaskStatus::Cancelled => {
                    guard.disarm();
                    return Err(RpcError::method(ErrorObject::new(
                        codes::INTERNAL_ERROR,
                        "The call was cancelled before it finished",
                    )));
                }
                TaskStatus::InputRequired => {
                    let requests = match detailed.get("inputRequests") {
                        Some(Value::Object(r)) => r.clone(),
                        _ => Map::new(),
                    };
                    // Refused (guard still armed): the task is cancelled, as nobody can answer.
                    ensure_client_can_answer(meta, &requests)?;
                    guard.disarm();
                    let kind = StateKind::Task {
                        task: id.to_string(),
                    };
                    let token = mrtr::sign(state, owner, None, &tool.name, kind);
                    return Ok(input_required_result(requests, token));
                }
                TaskStatus::Working => {}
            }
        }
        let gone = matches!(snapshot, Snapshot::Gone);
        if gone {
            guard.disarm();
            return Err(RpcError::method(ErrorObject::new(
                codes::INTERNAL_ERROR,
                "The task running this call no longer exists",
            )));
        }
        tokio::select! {
            changed = watcher.rx.changed() => {
                if changed.is_err() {
                    return Err(RpcError::unavailable());
                }
            }
            () = tokio::time::sleep_until(deadline), if !draining => {
                return Err(RpcError::method(ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "Tool {:?} did not finish within {} s; declare the io.modelcontextprotocol/tasks extension to run it as a task",
                        tool.name,
                        state.config().sync_wait.as_secs()
                    ),
                )));
            }
            () = state.shutdown().cancelled(), if !draining => {
                draining = true;
                deadline = deadline.min(tokio::time::Instant::now() + state.config().drain_grace);
            }
            () = tokio::time::sleep_until(deadline), if draining => {
                return Err(RpcError::unavailable());
            }
        }
    }
}

/// How many levels the caller lowers its task's priority by (`_meta`'s
/// [`PRIORITY_META_KEY`]: a whole number, 0 or less; never a raise).
fn lowered_priority(params: &Map<String, Value>) -> Result<u32, RpcError> {
    let Some(value) = params
        .get("_meta")
        .and_then(Value::as_object)
        .and_then(|meta| meta.get(PRIORITY_META_KEY))
    else {
        return Ok(0);
    };
    match value.as_i64() {
        Some(level) if level <= 0 => Ok(u32::try_from(level.unsigned_abs()).unwrap_or(u32::MAX)),
        Some(_) => Err(RpcError::invalid_params(format!(
            "_meta[\"{PRIORITY_META_KEY}\"] may only lower a task's priority: give 0 or less"
        ))),
        None => Err(RpcError::invalid_params(format!(
            "_meta[\"{PRIORITY_META_KEY}\"] must be a whole number, 0 or less"
        ))),
    }
}
