//! What one call to an upstream is, shared by the ways a call goes (`forward`: a plain
//! call and its input rounds; `upstream_task`: an upstream's own task; `input`: what it
//! asks on the way): the `tools/call` params we send, and how a call can fail.

use mcp_tasks_tools::ToolContext;
use mcp_tasks_wire::ErrorObject;
use rmcp::ServiceError;
use serde_json::{Value, json};

/// Why a call did not come back with an answer.
pub(crate) enum Failure {
    /// The upstream answered with a JSON-RPC error.
    Protocol(ErrorObject),
    /// Never reached the upstream: no connection, or it broke before the request left.
    NotSent(String),
    /// The connection broke while the upstream had the call.
    Lost,
    /// The upstream's answer was larger than its `max_result_bytes` allows.
    TooLarge,
    TimedOut,
    Interrupted,
}

/// What a failed request means for the call.
pub(crate) fn failure(e: ServiceError) -> Failure {
    match e {
        ServiceError::McpError(e) => {
            let mut error = ErrorObject::new(i64::from(e.code.0), e.message.to_string());
            if let Some(data) = e.data {
                error = error.with_data(data);
            }
            Failure::Protocol(error)
        }
        ServiceError::Timeout { .. } => Failure::TimedOut,
        ServiceError::Cancelled { .. } => Failure::Interrupted,
        // rmcp's HTTP limits (a JSON body, an SSE event) both say "exceeded the maximum
        // size of N bytes"; the limits are ours (`max_result_bytes`).
        ServiceError::TransportSend(e) if e.to_string().contains("exceeded the maximum size") => {
            Failure::TooLarge
        }
        _ => Failure::Lost,
    }
}

/// `tools/call` params for the upstream, with `extra` merged in. The run's W3C trace
/// context (`traceparent`, `tracestate`) goes in `_meta`, where MCP carries it, so the
/// upstream's spans join the trace of the `tools/call` that created the task.
pub(crate) fn call_params(tool: &str, ctx: &ToolContext, extra: Value) -> Value {
    let mut params = json!({ "name": tool, "arguments": ctx.arguments() });
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
        let trace: serde_json::Map<String, Value> = ctx
            .trace_context()
            .iter()
            .filter(|(k, v)| {
                matches!(k.as_str(), "traceparent" | "tracestate")
                    && v.as_str().is_some_and(|v| !v.is_empty())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !trace.is_empty() {
            params.insert("_meta".into(), Value::Object(trace));
        }
    }
    params
}
