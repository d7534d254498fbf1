//! Legacy (2025-11-25 and earlier) clients open with an `initialize` handshake and no
//! per-request `_meta`. This replica speaks only 2026-07-28, so it answers such a
//! handshake the way the legacy negotiation rules prescribe for a server that does not
//! support the requested version: with the version it does support. A legacy client
//! then sees a version it cannot speak and disconnects with that as its diagnostic,
//! which is the most useful thing it can be told. No session is created.
//!
//! A modern-framed `initialize` (one carrying `_meta`) is a removed method and gets
//! `-32601` like any other.

use mcp_tasks_wire::{PROTOCOL_VERSION, Request, meta_keys};
use serde_json::{Value, json};

use crate::AppState;

pub(crate) fn initialize(state: &AppState, request: &Request) -> Option<Value> {
    if request.method != "initialize"
        || request.params.contains_key("_meta")
        || !request
            .params
            .get("protocolVersion")
            .is_some_and(Value::is_string)
    {
        return None;
    }
    tracing::info!(
        requested = ?request.params.get("protocolVersion"),
        "legacy initialize answered with the only supported version"
    );
    Some(json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": { "tools": {} },
        "serverInfo": state.config().server_info,
        "instructions": format!(
            "This server supports only MCP {PROTOCOL_VERSION} (stateless, per-request _meta with {}); it does not support the requested version.",
            meta_keys::PROTOCOL_VERSION
        ),
    }))
}
