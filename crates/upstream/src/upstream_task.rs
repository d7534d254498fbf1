//! An upstream tool that runs as a task of the upstream's own (2025-11-25: `task` in
//! `tools/call`, answered with `CreateTaskResult`): followed with `tasks/get` until it
//! ends, then `tasks/result`; its status messages become ours, and our cancellation
//! becomes its `tasks/cancel`; while it is `input_required`, the requests it sends
//! through `tasks/result` are bridged to our task (`input.rs`).
//!
//! A 2026-07-28 upstream (Tasks extension, declared in our client capabilities) answers
//! with a flat `CreateTaskResult`: [`follow`] polls `tasks/get` until it ends, takes the
//! inline `result` or `error`, and answers its `inputRequests` with `tasks/update`.
//! Both revisions' requests go out as custom requests (rmcp adds the 2026-07-28 request
//! `_meta` itself) and their answers are read as JSON.

use std::time::Duration;

use mcp_tasks_tools::{Outcome, ToolContext};
use mcp_tasks_wire::{ErrorObject, codes};
use rmcp::model::{ClientRequest, CustomRequest};
use rmcp::service::{PeerRequestOptions, RoleClient};
use serde_json::{Value, json};

use crate::call::{Failure, failure};
use crate::connection::Connection;
use crate::input::{Asked, Budget};

/// Polls no faster than this, whatever the upstream's `pollInterval` says.
const MIN_POLL: Duration = Duration::from_millis(200);

pub(crate) async fn call(
    conn: &Connection,
    peer: &rmcp::Peer<RoleClient>,
    tool: &str,
    ctx: &ToolContext,
    timeout: Duration,
) -> Result<Outcome, Failure> {
    let ttl = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let created = request(
        peer,
        "tools/call",
        crate::call::call_params(tool, ctx, json!({ "task": { "ttl": ttl } })),
    )
    .await?;
    let Some(task_id) = created.pointer("/task/taskId").and_then(Value::as_str) else {
        // An upstream may answer a task request with the result itself.
        return Ok(Outcome::Complete(created));
    };
    let task_id = task_id.to_owned();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_message = None;
    let mut task = created["task"].clone();
    loop {
        let status = task["status"].as_str().unwrap_or("working").to_owned();
        relay_status(peer, ctx, &task_id, &task, &mut last_message).await?;
        match status.as_str() {
            "completed" | "failed" => break,
            "cancelled" => return Err(Failure::Interrupted),
            // Its input requests come while we wait in tasks/result (2025-11-25), which
            // then answers with the call's result.
            "input_required" => {
                let result = result_answering(conn, peer, tool, ctx, &task_id, timeout).await?;
                return Ok(Outcome::Complete(without_related_task(result)));
            }
            _ => {}
        }
        wait(peer, ctx, &task_id, &task["pollInterval"], deadline).await?;
        task = request(peer, "tasks/get", json!({ "taskId": task_id })).await?;
    }
    // tasks/result answers with the call's own result (or its JSON-RPC error).
    let result = request(peer, "tasks/result", json!({ "taskId": task_id })).await?;
    Ok(Outcome::Complete(without_related_task(result)))
}

/// A 2026-07-28 upstream task (`created` is its `CreateTaskResult`), followed to its end.
pub(crate) async fn follow(
    conn: &Connection,
    peer: &rmcp::Peer<RoleClient>,
    tool: &str,
    ctx: &ToolContext,
    timeout: Duration,
    created: Value,
) -> Result<Outcome, Failure> {
    let Some(task_id) = created["taskId"].as_str().map(str::to_owned) else {
        return Err(Failure::Protocol(ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!(
                "Upstream {:?} answered tools/call with a task without a taskId",
                conn.name()
            ),
        )));
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_message = None;
    let mut budget = Budget::default();
    // Keys are unique over a task's life, and `inputRequests` repeats a key until the
    // upstream has applied its answer: one answered is not asked again.
    let mut answered = std::collections::HashSet::new();
    let mut task = created;
    loop {
        relay_status(peer, ctx, &task_id, &task, &mut last_message).await?;
        match task["status"].as_str().unwrap_or("working") {
            "completed" => {
                return match task.get_mut("result").map(Value::take) {
                    Some(result @ Value::Object(_)) => {
                        Ok(Outcome::Complete(without_related_task(result)))
                    }
                    _ => Err(Failure::Protocol(ErrorObject::new(
                        codes::INTERNAL_ERROR,
                        format!(
                            "Upstream {:?} completed task {task_id:?} without a result",
                            conn.name()
                        ),
                    ))),
                };
            }
            "failed" => {
                let error = &task["error"];
                let mut e = ErrorObject::new(
                    error["code"].as_i64().unwrap_or(codes::INTERNAL_ERROR),
                    error["message"]
                        .as_str()
                        .or(task["statusMessage"].as_str())
                        .unwrap_or("the upstream's task failed"),
                );
                if let Some(data) = error.get("data") {
                    e = e.with_data(data.clone());
                }
                return Err(Failure::Protocol(e));
            }
            "cancelled" => return Err(Failure::Interrupted),
            "input_required" => {
                let mut requests: Vec<(String, Value)> = task["inputRequests"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| !answered.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                requests.sort_by(|a, b| a.0.cmp(&b.0));
                if !requests.is_empty() {
                    let answers = match crate::input::ask(
                        conn.name(),
                        tool,
                        ctx,
                        &mut budget,
                        requests.clone(),
                    )
                    .await
                    {
                        Ok(answers) => answers,
                        Err(e) => {
                            cancel(peer, &task_id).await;
                            return Err(e);
                        }
                    };
                    let responses: serde_json::Map<String, Value> =
                        requests.into_iter().map(|(k, _)| k).zip(answers).collect();
                    answered.extend(responses.keys().cloned());
                    request(
                        peer,
                        "tasks/update",
                        json!({ "taskId": task_id, "inputResponses": responses }),
                    )
                    .await?;
                    task = request(peer, "tasks/get", json!({ "taskId": task_id })).await?;
                    continue;
                }
            }
            _ => {}
        }
        wait(peer, ctx, &task_id, &task["pollIntervalMs"], deadline).await?;
        task = request(peer, "tasks/get", json!({ "taskId": task_id })).await?;
    }
}

/// The upstream task's status message, new since the last, as ours.
async fn relay_status(
    peer: &rmcp::Peer<RoleClient>,
    ctx: &ToolContext,
    task_id: &str,
    task: &Value,
    last_message: &mut Option<String>,
) -> Result<(), Failure> {
    if let Some(m) = task["statusMessage"].as_str()
        && last_message.as_deref() != Some(m)
    {
        *last_message = Some(m.to_owned());
        if ctx.set_status(m).await.is_err() {
            cancel(peer, task_id).await;
            return Err(Failure::Interrupted);
        }
    }
    Ok(())
}

/// Sleeps the upstream's poll interval (within bounds) before its next `tasks/get`;
/// our cancellation or the call's deadline becomes its `tasks/cancel`.
async fn wait(
    peer: &rmcp::Peer<RoleClient>,
    ctx: &ToolContext,
    task_id: &str,
    interval: &Value,
    deadline: tokio::time::Instant,
) -> Result<(), Failure> {
    if tokio::time::Instant::now() >= deadline {
        cancel(peer, task_id).await;
        return Err(Failure::TimedOut);
    }
    let every = interval
        .as_u64()
        .map_or(MIN_POLL, Duration::from_millis)
        .clamp(MIN_POLL, Duration::from_secs(5));
    if ctx.sleep(every).await.is_err() {
        cancel(peer, task_id).await;
        return Err(Failure::Interrupted);
    }
    Ok(())
}

fn without_related_task(mut result: Value) -> Value {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("io.modelcontextprotocol/related-task");
    }
    result
}

/// `tasks/result` of an upstream task that waits for input: the requests it sends
/// meanwhile (naming the task) are asked of our client, and answered.
async fn result_answering(
    conn: &Connection,
    peer: &rmcp::Peer<RoleClient>,
    tool: &str,
    ctx: &ToolContext,
    task_id: &str,
    timeout: Duration,
) -> Result<Value, Failure> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(
        "tasks/result",
        Some(json!({ "taskId": task_id })),
    ));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| Failure::NotSent(e.to_string()))?;
    let mut registration = conn.calls.register(
        handle.progress_token.clone(),
        handle.id.clone(),
        Some(task_id.to_owned()),
        ctx.owner(),
    );
    let mut budget = Budget::default();
    let response = handle.await_response();
    tokio::pin!(response);
    let answer = loop {
        tokio::select! {
            r = &mut response => break r,
            Some(asked) = registration.inputs.recv() => {
                let Asked { request, reply } = asked;
                // Input the client cannot give: the upstream hears so, and may go on.
                if let Some(why) = crate::input::refusal(conn.name(), tool, ctx, &request) {
                    tracing::info!(upstream = %conn.name(), "{why}");
                    let _ = reply.send(Err(ErrorObject::new(codes::INVALID_REQUEST, why)));
                    continue;
                }
                let answered = tokio::select! {
                    a = crate::input::ask(conn.name(), tool, ctx, &mut budget, vec![("elicitation".into(), request)]) => a,
                    r = &mut response => break r,
                };
                match answered {
                    Ok(mut answers) => {
                        let _ = reply.send(Ok(answers.pop().unwrap_or(Value::Null)));
                    }
                    Err(e) => {
                        if let Failure::Protocol(error) = &e {
                            let _ = reply.send(Err(error.clone()));
                        }
                        cancel(peer, task_id).await;
                        return Err(e);
                    }
                }
            }
            () = ctx.cancelled() => {
                cancel(peer, task_id).await;
                return Err(Failure::Interrupted);
            }
        }
    };
    let answer = answer.map_err(failure)?;
    serde_json::to_value(answer)
        .map_err(|e| Failure::Protocol(ErrorObject::new(codes::INTERNAL_ERROR, e.to_string())))
}

async fn request(
    peer: &rmcp::Peer<RoleClient>,
    method: &str,
    params: Value,
) -> Result<Value, Failure> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let handle = peer
        .send_request_with_option(
            request,
            PeerRequestOptions::with_timeout(Duration::from_secs(60)),
        )
        .await
        .map_err(|e| Failure::NotSent(e.to_string()))?;
    let answer = handle.await_response().await.map_err(failure)?;
    serde_json::to_value(answer)
        .map_err(|e| Failure::Protocol(ErrorObject::new(codes::INTERNAL_ERROR, e.to_string())))
}

async fn cancel(peer: &rmcp::Peer<RoleClient>, task_id: &str) {
    if let Err(e) = request(peer, "tasks/cancel", json!({ "taskId": task_id })).await {
        tracing::debug!(error = ?std::mem::discriminant(&e), "tasks/cancel upstream failed");
    }
}
