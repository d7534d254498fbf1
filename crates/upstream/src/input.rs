//! Input an upstream asks for during a call, bridged to our task's `inputRequests`:
//! - a 2025-era upstream sends `elicitation/create` on its back channel while the call is
//!   open (or, for a task of its own, while we wait in `tasks/result`); the answer goes
//!   back as that request's response and the call goes on;
//! - a 2026-07-28 upstream answers the call with an `InputRequiredResult`; the answers go
//!   back in the retried call's `inputResponses` (with its `requestState`).
//!
//! Either way the run keeps the task (and the call) while the client answers:
//! [`ToolContext::ask`]. What reaches the client is only what the schema declares, and
//! only what we declared to upstreams (`declared.rs`). What an upstream can make us hold
//! is bounded: a request's size, the requests per call, and the requests waiting at once
//! (`routing.rs`).

use mcp_tasks_tools::{ContextError, ToolContext};
use mcp_tasks_wire::{ErrorObject, codes};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::call::Failure;

/// Largest input request (its JSON) an upstream may make.
pub(crate) const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Most input requests one call may make, over all its rounds.
pub(crate) const MAX_REQUESTS_PER_CALL: usize = 32;

/// An input request from the upstream's back channel, and where its answer goes.
pub(crate) struct Asked {
    pub(crate) request: Value,
    pub(crate) reply: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// A back-channel request's params as an input request (`{"method", "params"}`), and the
/// upstream task it names, if any. Its `_meta` is the upstream's business, not the
/// client's.
pub(crate) fn from_upstream(method: &str, mut params: Value) -> (Option<String>, Value) {
    let task = params
        .pointer("/_meta/io.modelcontextprotocol~1related-task/taskId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(p) = params.as_object_mut() {
        p.remove("_meta");
        // rmcp keeps an absent (2026-07-28) URL elicitation id as "".
        if p.get("elicitationId").and_then(Value::as_str) == Some("") {
            p.remove("elicitationId");
        }
    }
    (task, json!({ "method": method, "params": params }))
}

/// The requests one call has made so far.
#[derive(Default)]
pub(crate) struct Budget {
    used: usize,
}

/// Asks the client for `requests` (each with the key the upstream gave it, or one we
/// made up), holding the task, and returns the answers in order.
pub(crate) async fn ask(
    upstream: &str,
    tool: &str,
    ctx: &ToolContext,
    budget: &mut Budget,
    requests: Vec<(String, Value)>,
) -> Result<Vec<Value>, Failure> {
    // A round that asks nothing (a 2026-07-28 retry with only requestState) counts too,
    // so an upstream cannot keep us calling for ever.
    budget.used += requests.len().max(1);
    if budget.used > MAX_REQUESTS_PER_CALL {
        return Err(refused(format!(
            "Upstream {upstream:?} asked for input more than {MAX_REQUESTS_PER_CALL} times during tool {tool:?}"
        )));
    }
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let mut passed = Vec::with_capacity(requests.len());
    for (key, request) in requests {
        if let Some(why) = refusal(upstream, tool, ctx, &request) {
            return Err(refused(why));
        }
        let request = crate::declared::declared(&request).map_err(|why| {
            refused(format!(
                "Upstream {upstream:?} asked for {why} during tool {tool:?}"
            ))
        })?;
        let size = serde_json::to_vec(&request).map_or(usize::MAX, |v| v.len());
        if size > MAX_REQUEST_BYTES {
            return Err(refused(format!(
                "Upstream {upstream:?} asked for input larger than {MAX_REQUEST_BYTES} bytes during tool {tool:?}"
            )));
        }
        passed.push((key, request));
    }
    match ctx.ask(&passed).await {
        Ok(answers) => Ok(answers),
        Err(ContextError::Interrupted) => Err(Failure::Interrupted),
        Err(ContextError::Unavailable(why)) => Err(refused(format!(
            "Upstream {upstream:?} asked for input during tool {tool:?}, which could not be passed on: {why}"
        ))),
    }
}

/// Why `request` cannot be put to the client, if it cannot: a kind (or a mode, or a
/// field) we do not pass on, one the client that created the task did not declare, or a
/// run with no task to ask through (a sync-only tool).
pub(crate) fn refusal(
    upstream: &str,
    tool: &str,
    ctx: &ToolContext,
    request: &Value,
) -> Option<String> {
    let method = request["method"].as_str().unwrap_or_default();
    if let Err(why) = crate::declared::declared(request) {
        return Some(format!(
            "Upstream {upstream:?} asked for {why} during tool {tool:?}"
        ));
    }
    if ctx.task_id().is_none() {
        return Some(format!(
            "Upstream {upstream:?} asked for input during tool {tool:?}, which runs without a task (sync-only), so there is nobody to ask"
        ));
    }
    let declared = match ctx.client_capabilities() {
        Some(caps) => caps.can_answer(method, request.get("params")),
        // A task created before capabilities were kept: form elicitation, as before.
        None => {
            method == "elicitation/create"
                && request
                    .pointer("/params/mode")
                    .and_then(Value::as_str)
                    .unwrap_or("form")
                    == "form"
        }
    };
    (!declared).then(|| {
        format!(
            "Upstream {upstream:?} asked for input the client did not declare it can give ({method}) during tool {tool:?}"
        )
    })
}

fn refused(message: String) -> Failure {
    Failure::Protocol(
        ErrorObject::new(codes::INTERNAL_ERROR, message)
            .with_data(json!({ "reason": "UPSTREAM_INPUT_REFUSED" })),
    )
}

/// A 2026-07-28 `InputRequiredResult`: its requests (by the upstream's keys, in key
/// order) and its `requestState`.
pub(crate) fn input_required(result: &Value) -> (Vec<(String, Value)>, Option<String>) {
    let mut requests: Vec<(String, Value)> = result
        .get("inputRequests")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    requests.sort_by(|a, b| a.0.cmp(&b.0));
    let state = result
        .get("requestState")
        .and_then(Value::as_str)
        .map(str::to_owned);
    (requests, state)
}

/// What the retried call carries: the answers under the upstream's keys, and its state.
pub(crate) fn retry_params(
    requests: &[(String, Value)],
    answers: Vec<Value>,
    state: Option<String>,
) -> Value {
    let responses: Map<String, Value> = requests
        .iter()
        .map(|(k, _)| k.clone())
        .zip(answers)
        .collect();
    let mut extra = json!({ "inputResponses": responses });
    if let Some(state) = state {
        extra["requestState"] = Value::String(state);
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_channel_requests_lose_their_meta() {
        let (task, request) = from_upstream(
            "elicitation/create",
            json!({"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{}},
                   "_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"}}}),
        );
        assert_eq!(task.as_deref(), Some("t1"));
        assert_eq!(request["method"], "elicitation/create");
        assert!(request["params"].get("_meta").is_none(), "{request}");
        assert_eq!(request["params"]["message"], "m");
    }

    #[test]
    fn a_retry_carries_answers_by_the_upstreams_keys() {
        let result = json!({"resultType":"input_required","requestState":"s",
            "inputRequests":{"b":{"method":"elicitation/create"},"a":{"method":"elicitation/create"}}});
        let (requests, state) = input_required(&result);
        let keys: Vec<&str> = requests.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        let extra = retry_params(&requests, vec![json!(1), json!(2)], state);
        assert_eq!(
            extra,
            json!({"inputResponses":{"a":1,"b":2},"requestState":"s"})
        );
    }
}
