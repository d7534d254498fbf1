//! The protocol's names as the spec writes them, spelled out here rather than taken from
//! the wire crate, so that a constant changed there fails the tests instead of moving
//! them along with it.

use serde_json::{Value, json};

pub(crate) const VERSION: &str = "2026-07-28";
pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";
pub(crate) const PV: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const CC: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The capabilities of a client with the Tasks extension and elicitation.
pub(crate) fn tasks_caps() -> Value {
    json!({ "elicitation": {}, "extensions": { TASKS: {} } })
}

/// The `_meta` every request carries, for a client declaring `caps`.
pub(crate) fn meta(caps: Value) -> Value {
    json!({ PV: VERSION, CC: caps })
}

/// The `_meta` of a client with the Tasks extension and elicitation.
pub(crate) fn tasks_meta() -> Value {
    meta(tasks_caps())
}

/// The key of the body value that `Mcp-Name` mirrors, for the methods that have one.
pub(crate) fn name_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// The text of a tool result's first content item.
pub(crate) fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// The texts of every content item of a tool result, one a line.
pub(crate) fn all_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
