//! 2025-era shapes of what the 2026-07-28 methods produce: results without `resultType`,
//! and the 2025-11-25 experimental `Task` (`ttl`, `pollInterval`, tool errors as
//! `failed`).

use mcp_tasks_wire::{ErrorObject, codes, meta_keys};
use serde_json::{Map, Value, json};

/// A 2026-07-28 result as a 2025 client reads it: `resultType` is not part of it.
pub(crate) fn result(mut result: Map<String, Value>) -> Map<String, Value> {
    result.remove("resultType");
    result
}

/// Whether a completed task's `CallToolResult` reports a tool error.
fn is_tool_error(detailed: &Map<String, Value>) -> bool {
    detailed
        .get("result")
        .and_then(|r| r.get("isError"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The 2025-11-25 status of a task: a tool call whose result is an error is `failed`
/// there, where 2026-07-28 says `completed`.
pub(crate) fn status(detailed: &Map<String, Value>) -> &str {
    match detailed.get("status").and_then(Value::as_str) {
        Some("completed") if is_tool_error(detailed) => "failed",
        Some(status) => status,
        None => "working",
    }
}

/// A 2025-11-25 `Task` from a 2026-07-28 `DetailedTask`.
pub(crate) fn task(detailed: &Map<String, Value>) -> Map<String, Value> {
    let mut t = Map::new();
    for key in ["taskId", "statusMessage", "createdAt", "lastUpdatedAt"] {
        if let Some(v) = detailed.get(key) {
            t.insert(key.into(), v.clone());
        }
    }
    t.insert("status".into(), json!(status(detailed)));
    t.insert(
        "ttl".into(),
        detailed.get("ttlMs").cloned().unwrap_or(Value::Null),
    );
    if let Some(p) = detailed.get("pollIntervalMs") {
        t.insert("pollInterval".into(), p.clone());
    }
    // A failed task says why (2025-11-25: tasks/get SHOULD carry the diagnostic).
    if !t.contains_key("statusMessage") {
        let why = match (detailed.get("error"), status(detailed)) {
            (Some(error), _) => error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
            (None, "failed") => Some("The tool reported an error (isError)".to_owned()),
            _ => None,
        };
        if let Some(why) = why {
            t.insert("statusMessage".into(), json!(why));
        }
    }
    t
}

/// `_meta["io.modelcontextprotocol/related-task"]`, which 2025-11-25 puts on every
/// message about a task that does not name it otherwise.
pub(crate) fn with_related_task(
    mut message: Map<String, Value>,
    task_id: &str,
) -> Map<String, Value> {
    let meta = message
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            meta_keys::LEGACY_RELATED_TASK.into(),
            json!({ "taskId": task_id }),
        );
    }
    message
}

/// What the call a finished task ran answers: its `CallToolResult`, or its JSON-RPC
/// error. `None` while the task is not finished.
pub(crate) fn outcome(
    detailed: &Map<String, Value>,
) -> Option<Result<Map<String, Value>, ErrorObject>> {
    match detailed.get("status").and_then(Value::as_str)? {
        "completed" => Some(Ok(result(
            detailed
                .get("result")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_else(|| {
                    let mut m = Map::new();
                    m.insert("content".into(), json!([]));
                    m
                }),
        ))),
        "failed" => Some(Err(detailed
            .get("error")
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .unwrap_or_else(ErrorObject::internal))),
        "cancelled" => Some(Err(ErrorObject::new(
            codes::INTERNAL_ERROR,
            "The task was cancelled before it finished",
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn tasks_take_the_2025_names_and_statuses() {
        let detailed = map(json!({
            "taskId": "t", "status": "completed", "createdAt": "c", "lastUpdatedAt": "u",
            "ttlMs": 60000, "pollIntervalMs": 500,
            "result": { "content": [], "isError": true, "resultType": "complete" }
        }));
        let t = Value::Object(task(&detailed));
        assert_eq!(t["status"], "failed");
        assert_eq!(t["ttl"], 60000);
        assert_eq!(t["pollInterval"], 500);
        assert!(t.get("ttlMs").is_none() && t.get("result").is_none(), "{t}");
        assert!(t["statusMessage"].is_string());
        let working = Value::Object(task(&map(
            json!({ "taskId": "t", "status": "working", "ttlMs": null }),
        )));
        assert_eq!(working["ttl"], Value::Null);
        assert!(working.get("statusMessage").is_none());
        let failed =
            map(json!({ "status": "failed", "error": { "code": -32603, "message": "boom" } }));
        assert_eq!(task(&failed)["statusMessage"], "boom");
        assert_eq!(
            outcome(&failed).and_then(Result::err).map(|e| e.code),
            Some(-32603)
        );
    }

    #[test]
    fn outcomes_lose_result_type() {
        let done = map(
            json!({ "status": "completed", "result": { "content": [], "resultType": "complete" } }),
        );
        let r = outcome(&done).and_then(Result::ok).unwrap_or_default();
        assert!(r.get("resultType").is_none() && r.contains_key("content"));
        assert!(outcome(&map(json!({ "status": "working" }))).is_none());
        assert!(outcome(&map(json!({ "status": "cancelled" }))).is_some_and(|o| o.is_err()));
        let related = Value::Object(with_related_task(Map::new(), "t"));
        assert_eq!(
            related["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            "t"
        );
    }
}
