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

/// Server capabilities beyond tools, offered only when something provides them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    pub resources: bool,
    pub prompts: bool,
    pub completions: bool,
}

/// `DiscoverResult` without `_meta` (the server stamps it). Tools and the Tasks extension
/// are always offered; resources, prompts and completions when `offered` says so. Nothing
/// offers `listChanged` or `subscribe`, since the lists never change.
pub fn discover_result(
    instructions: Option<&str>,
    cache: CacheHint,
    offered: Offered,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("resultType".into(), json!("complete"));
    m.insert("supportedVersions".into(), json!(SUPPORTED_VERSIONS));
    let mut caps = Map::new();
    caps.insert("tools".into(), json!({}));
    for (on, name) in [
        (offered.prompts, "prompts"),
        (offered.resources, "resources"),
        (offered.completions, "completions"),
    ] {
        if on {
            caps.insert(name.into(), json!({}));
        }
    }
    caps.insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
    m.insert("capabilities".into(), Value::Object(caps));
    if let Some(i) = instructions {
        m.insert("instructions".into(), json!(i));
    }
    cache.apply(&mut m);
    m
}

/// A `tools/list`, `prompts/list`, `resources/list` or `resources/templates/list` result
/// (`key` names the list), without `_meta`: one page of items, and the cursor of the
/// next page when there is one.
pub fn list_result(
    key: &str,
    items: Value,
    next_cursor: Option<String>,
    cache: CacheHint,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(key.into(), items);
    if let Some(cursor) = next_cursor {
        m.insert("nextCursor".into(), json!(cursor));
    }
    m.insert("resultType".into(), json!("complete"));
    cache.apply(&mut m);
    m
}

/// A `ReadResourceResult` without `_meta`: the contents, with cache hints.
pub fn read_resource_result(contents: Value, cache: CacheHint) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("contents".into(), contents);
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
