//! An upstream tool as one of ours: its descriptor, and a handler that forwards
//! `tools/call` to the upstream, relays its progress, and passes cancellation on.

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_tools::{Outcome, Tool, ToolContext, ToolError, ToolResult};
use mcp_tasks_wire::backoff::Backoff;
use mcp_tasks_wire::{ErrorObject, codes};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient};
use serde_json::{Value, json};

use crate::call::{Failure, call_params, failure};
use crate::config::ToolSettings;
use crate::connection::{Connection, error_id};
use crate::input::{Asked, Budget};
use crate::routing::CallEvent;

/// How long a call waits for the upstream to be connected before counting an attempt: a
/// restarted stdio child (an interpreter importing its SDK) can take seconds to answer.
const CONNECT_WAIT: Duration = Duration::from_secs(20);

/// Builds our tool for one of the upstream's (`descriptor` as its `tools/list` gave it).
pub(crate) fn tool(
    conn: &Arc<Connection>,
    descriptor: &Value,
    settings: ToolSettings,
) -> Result<Tool, String> {
    let upstream_name = descriptor
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a tool without a name")?
        .to_owned();
    let name = format!("{}{upstream_name}", conn.config.prefix);
    let mut builder = Tool::builder(name)
        .description(
            descriptor
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
        .input_schema(
            descriptor
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
        )
        .policy(settings.mode)
        .idempotent(settings.idempotent)
        .max_attempts(settings.max_attempts)
        .ttl(Some(settings.ttl))
        .group(conn.name());
    if let Some(title) = descriptor.get("title").and_then(Value::as_str) {
        builder = builder.title(title);
    }
    if let Some(out) = descriptor.get("outputSchema") {
        builder = builder.output_schema(out.clone());
    }
    if let Some(annotations) = descriptor.get("annotations") {
        builder = builder.annotations(annotations.clone());
    }
    let conn = conn.clone();
    builder
        .handler(move |ctx| {
            let conn = conn.clone();
            let upstream_name = upstream_name.clone();
            async move { forward(&conn, &upstream_name, settings, ctx).await }
        })
        .build()
}

async fn forward(
    conn: &Arc<Connection>,
    tool: &str,
    settings: ToolSettings,
    ctx: ToolContext,
) -> ToolResult {
    let upstream = conn.name().to_owned();
    let mut last = String::from("not connected");
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    for attempt in 1..=settings.max_attempts {
        if attempt > 1 {
            ctx.sleep(backoff.next_delay()).await?;
        }
        let peer = tokio::select! {
            p = conn.peer_within(CONNECT_WAIT) => p,
            () = ctx.cancelled() => return Err(ToolError::Interrupted),
        };
        let Some(peer) = peer else {
            last = conn.last_error().unwrap_or_else(|| "not connected".into());
            continue;
        };
        // Open on the connection until this attempt ends, whatever it sends meanwhile.
        let _call = conn.calls.open(ctx.owner());
        let called = match call_once(conn, &peer, tool, &ctx, settings.timeout).await {
            // 2025-11-25: a listed tool refused with -32601 is one the upstream runs only as
            // a task of its own (`taskSupport: "required"`, a field rmcp's Tool does not
            // keep, so we learn it from the refusal: as a JSON-RPC error, or as the
            // TypeScript SDK reports it, a tool error "MCP error -32601: ...").
            Err(Failure::Protocol(e)) if e.code == codes::METHOD_NOT_FOUND => {
                crate::upstream_task::call(conn, &peer, tool, &ctx, settings.timeout).await
            }
            Ok(Outcome::Complete(r)) if needs_task(&r) => {
                crate::upstream_task::call(conn, &peer, tool, &ctx, settings.timeout).await
            }
            other => other,
        };
        match called {
            Ok(outcome) => return within_limit(conn, tool, outcome),
            Err(Failure::TooLarge) => return Err(too_large(conn, tool, None)),
            Err(Failure::Protocol(e)) => return Err(ToolError::Protocol(e)),
            Err(Failure::Interrupted) => return Err(ToolError::Interrupted),
            Err(Failure::TimedOut) => {
                return Err(ToolError::Protocol(ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "Upstream {upstream:?} did not answer tool {tool:?} within {} ms",
                        settings.timeout.as_millis()
                    ),
                )));
            }
            Err(Failure::NotSent(why)) => {
                conn.broken(&peer);
                // The transport's words may name the upstream's URL: logged, not returned.
                let id = error_id();
                tracing::warn!(%upstream, error_id = %id, error = %why, "a request to the upstream could not be sent");
                last = format!("the request could not be sent (error {id})");
            }
            Err(Failure::Lost) => {
                conn.broken(&peer);
                if !settings.idempotent {
                    return Err(ToolError::Protocol(
                        ErrorObject::new(
                            codes::INTERNAL_ERROR,
                            format!(
                                "Upstream {upstream:?} was lost during the call, and tool {tool:?} is not marked idempotent, so it was not run again"
                            ),
                        )
                        .with_data(json!({ "reason": "UPSTREAM_LOST_NOT_IDEMPOTENT", "upstream": upstream })),
                    ));
                }
                tracing::warn!(%upstream, "upstream lost during an idempotent call; calling again");
                last = "the connection broke during the call".into();
            }
        }
    }
    Err(ToolError::Protocol(
        ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!(
                "Upstream {upstream:?} was unreachable for tool {tool:?} after {} attempts: {last}",
                settings.max_attempts
            ),
        )
        .with_data(json!({ "reason": "UPSTREAM_UNREACHABLE", "upstream": upstream })),
    ))
}

/// One call, over as many rounds as a 2026-07-28 upstream asks for input.
async fn call_once(
    conn: &Connection,
    peer: &rmcp::Peer<RoleClient>,
    tool: &str,
    ctx: &ToolContext,
    timeout: Duration,
) -> Result<Outcome, Failure> {
    let mut budget = Budget::default();
    let mut extra = json!({});
    loop {
        match call_round(conn, peer, tool, ctx, timeout, extra, &mut budget).await? {
            Round::Done(outcome) => return Ok(outcome),
            Round::Task(created) => {
                return crate::upstream_task::follow(conn, peer, tool, ctx, timeout, created).await;
            }
            Round::Input(result) => {
                let (requests, state) = crate::input::input_required(&result);
                let answers =
                    crate::input::ask(conn.name(), tool, ctx, &mut budget, requests.clone())
                        .await?;
                extra = crate::input::retry_params(&requests, answers, state);
            }
        }
    }
}

enum Round {
    Done(Outcome),
    /// A 2026-07-28 `InputRequiredResult`, as JSON.
    Input(Value),
    /// A 2026-07-28 `CreateTaskResult` (Tasks extension), as JSON.
    Task(Value),
}

async fn call_round(
    conn: &Connection,
    peer: &rmcp::Peer<RoleClient>,
    tool: &str,
    ctx: &ToolContext,
    timeout: Duration,
    extra: Value,
    budget: &mut Budget,
) -> Result<Round, Failure> {
    let params: CallToolRequestParams = serde_json::from_value(call_params(tool, ctx, extra))
        .map_err(|e| Failure::Protocol(ErrorObject::new(codes::INVALID_PARAMS, e.to_string())))?;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| Failure::NotSent(e.to_string()))?;
    let id = handle.id.clone();
    let mut registration =
        conn.calls
            .register(handle.progress_token.clone(), id.clone(), None, ctx.owner());
    let response = handle.await_response();
    tokio::pin!(response);
    let result = loop {
        tokio::select! {
            r = &mut response => break r,
            Some(event) = registration.events.recv() => {
                let message = match event {
                    CallEvent::Progress { progress, total, message } => progress_text(progress, total, message.as_deref()),
                    CallEvent::Log(text) => text,
                };
                if ctx.set_status(&message).await.is_err() {
                    cancel(peer, id, "the task's run ended").await;
                    return Err(Failure::Interrupted);
                }
            }
            Some(asked) = registration.inputs.recv() => {
                let Asked { request, reply } = asked;
                // Input the client cannot give: the upstream hears so, and may go on.
                if let Some(why) = crate::input::refusal(conn.name(), tool, ctx, &request) {
                    tracing::info!(upstream = %conn.name(), "{why}");
                    let _ = reply.send(Err(ErrorObject::new(codes::INVALID_REQUEST, why)));
                    continue;
                }
                let answered = tokio::select! {
                    a = crate::input::ask(conn.name(), tool, ctx, budget, vec![("elicitation".into(), request)]) => a,
                    // The call ended while the client was asked: the question is moot.
                    r = &mut response => break r,
                };
                match answered {
                    Ok(mut answers) => {
                        let _ = reply.send(Ok(answers.pop().unwrap_or(Value::Null)));
                    }
                    Err(Failure::Protocol(e)) => {
                        let _ = reply.send(Err(e.clone()));
                        cancel(peer, id, "the task failed").await;
                        return Err(Failure::Protocol(e));
                    }
                    Err(other) => {
                        cancel(peer, id, "the task was cancelled").await;
                        return Err(other);
                    }
                }
            }
            () = ctx.cancelled() => {
                cancel(peer, id, "the task was cancelled").await;
                return Err(Failure::Interrupted);
            }
        }
    };
    match result {
        Ok(ServerResult::CallToolResult(r)) => serde_json::to_value(r)
            .map(|v| Round::Done(Outcome::Complete(v)))
            .map_err(|e| Failure::Protocol(ErrorObject::new(codes::INTERNAL_ERROR, e.to_string()))),
        Ok(ServerResult::InputRequiredResult(r)) => serde_json::to_value(r)
            .map(Round::Input)
            .map_err(|e| Failure::Protocol(ErrorObject::new(codes::INTERNAL_ERROR, e.to_string()))),
        Ok(ServerResult::CreateTaskResult(r)) => serde_json::to_value(r)
            .map(Round::Task)
            .map_err(|e| Failure::Protocol(ErrorObject::new(codes::INTERNAL_ERROR, e.to_string()))),
        Ok(other) => Err(Failure::Protocol(ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!(
                "Upstream {:?} answered tools/call with an unexpected result: {}",
                conn.name(),
                serde_json::to_value(&other)
                    .ok()
                    .and_then(|v| v.get("resultType").cloned())
                    .unwrap_or(Value::Null)
            ),
        ))),
        Err(e) => Err(failure(e)),
    }
}

/// The result, unless it is larger than the upstream's `max_result_bytes` (an answer too
/// large for the transport never gets here: `stdio.rs`, and rmcp's HTTP limits).
fn within_limit(conn: &Connection, tool: &str, outcome: Outcome) -> ToolResult {
    let limit = conn.config.max_result_bytes;
    let size = match &outcome {
        Outcome::Complete(result) => json_size(result),
        _ => 0,
    };
    if size <= limit {
        return Ok(outcome);
    }
    Err(too_large(conn, tool, Some(size)))
}

fn too_large(conn: &Connection, tool: &str, size: Option<usize>) -> ToolError {
    let limit = conn.config.max_result_bytes;
    tracing::warn!(upstream = %conn.name(), %tool, bytes = ?size, limit, "upstream result larger than max_result_bytes; the call failed");
    ToolError::Protocol(
        ErrorObject::new(
            codes::INTERNAL_ERROR,
            crate::stdio::too_large(conn.name(), limit),
        )
        .with_data(json!({ "reason": "UPSTREAM_RESULT_TOO_LARGE", "limit": limit })),
    )
}

/// The bytes `value` takes as JSON, counted without building the text.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

fn needs_task(result: &Value) -> bool {
    result["isError"] == json!(true)
        && result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("MCP error -32601") && t.contains("task"))
}

/// `notifications/cancelled` for the call; the upstream may or may not stop.
pub(crate) async fn cancel(
    peer: &rmcp::Peer<RoleClient>,
    id: rmcp::model::RequestId,
    reason: &str,
) {
    let notification = CancelledNotification::new(CancelledNotificationParam::new(
        Some(id),
        Some(reason.to_owned()),
    ));
    if let Err(e) = peer.send_notification(notification.into()).await {
        tracing::debug!(error = %e, "could not send notifications/cancelled upstream");
    }
}

/// "3/5: step 3", "3/5", "3: step 3" or "3".
fn progress_text(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let n = |v: f64| {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{}", v as i64)
        } else {
            format!("{v}")
        }
    };
    let count = match total {
        Some(t) => format!("{}/{}", n(progress), n(t)),
        None => n(progress),
    };
    match message {
        Some(m) if !m.is_empty() => format!("{count}: {m}"),
        _ => count,
    }
}
