//! Builders for results the server sends, so every one carries `resultType` and the
//! server's identity.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::{SUPPORTED_VERSIONS, TASKS_EXTENSION, meta_keys};

/// `Implementation`: the server's name and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
}

impl Implementation {
    /// Puts `resultType` (unless already set) and `_meta.serverInfo` on a result.
    pub fn stamp(&self, result: &mut Map<String, Value>, result_type: &str) {
        result
            .entry("resultType")
            .or_insert_with(|| json!(result_type));
        let meta = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(meta_keys::SERVER_INFO.into(), json!(self));
        }
    }

    /// A finished `CallToolResult` as stored on a completed task: it carries its own
    /// `resultType` and server identity, because it is delivered inside `tasks/get`.
    pub fn stamped_call_tool_result(&self, mut result: Value) -> Value {
        if let Some(obj) = result.as_object_mut() {
            if let Some(meta) = obj.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove(meta_keys::LEGACY_RELATED_TASK);
            }
            self.stamp(obj, "complete");
        }
        result
    }
}

/// Cache hints of a `CacheableResult` (`ttlMs` here is cache freshness, unrelated to a
/// task's `ttlMs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    pub ttl_ms: u64,
    pub public: bool,
}

impl CacheHint {
    pub fn apply(self, result: &mut Map<String, Value>) {
        result.insert("ttlMs".into(), json!(self.ttl_ms));
        result.insert(
            "cacheScope".into(),
            json!(if self.public { "public" } else { "private" }),
        );
    }
}

/// `DiscoverResult` without `_meta` (the server stamps it). Prompts and resources are
/// offered (both empty) so their list methods are real; nothing offers `listChanged` or
/// `subscribe`, since the lists never change.
pub fn discover_result(instructions: Option<&str>, cache: CacheHint) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("resultType".into(), json!("complete"));
    m.insert("supportedVersions".into(), json!(SUPPORTED_VERSIONS));
    m.insert(
        "capabilities".into(),
        json!({
            "tools": {},
            "prompts": {},
            "resources": {},
            "extensions": { TASKS_EXTENSION: {} }
        }),
    );
    if let Some(i) = instructions {
        m.insert("instructions".into(), json!(i));
    }
    cache.apply(&mut m);
    m
}

/// A `tools/list`, `prompts/list`, `resources/list` or `resources/templates/list` result
/// (`key` names the list), without `_meta`. Every item fits on the first page, so there
/// is never a `nextCursor`.
pub fn list_result(key: &str, items: Value, cache: CacheHint) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(key.into(), items);
    m.insert("resultType".into(), json!("complete"));
    cache.apply(&mut m);
    m
}

/// An MRTR `InputRequiredResult`: the requests the call needs answered, and the signed
/// `requestState` the client sends back with its answers.
pub fn input_required_result(
    requests: Map<String, Value>,
    request_state: String,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("resultType".into(), json!("input_required"));
    m.insert("inputRequests".into(), Value::Object(requests));
    m.insert("requestState".into(), json!(request_state));
    m
}

/// A text-only `CallToolResult`.
pub fn text_result(text: impl Into<String>, is_error: bool) -> Value {
    json!({
        "content": [{ "type": "text", "text": text.into() }],
        "isError": is_error,
    })
}
