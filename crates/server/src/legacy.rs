//! A legacy `initialize` (no `_meta`) that no session answers: one asking for 2026-07-28
//! (rmcp's default start-up sends that), or for a version this server does not speak.
//! The legacy negotiation rules prescribe answering with a version the server supports,
//! its latest: 2026-07-28. A client that cannot speak it disconnects with that as its
//! diagnostic. No session is created. (`initialize` at 2025-03-26, 2025-06-18 or
//! 2025-11-25 opens a session instead: see the `session` module.)
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
        "legacy initialize answered with the latest supported version"
    );
    Some(json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": { "tools": {} },
        "serverInfo": state.config().server_info,
        "instructions": format!(
            "This server speaks MCP {PROTOCOL_VERSION} (stateless, per-request _meta with {}), and 2025-03-26, 2025-06-18 and 2025-11-25 through initialize; it does not support the requested version.",
            meta_keys::PROTOCOL_VERSION
        ),
    }))
}
