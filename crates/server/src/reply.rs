//! What a request gets back, before the HTTP layer writes it.

use mcp_tasks_wire::SerializedResult;

/// One JSON-RPC result, or a response a method built itself: a stream that carries its
/// own frames and ends with the result (`subscriptions/listen`, a 2025-era `tools/call`),
/// or a result with headers of its own (a 2025-era `initialize` names its session).
pub(crate) enum Reply {
    Result(serde_json::Value),
    /// A result already serialised, stamped and all, around stored JSON that is sent on
    /// unparsed (`tasks/get`).
    Serialized(SerializedResult),
    Stream(axum::response::Response),
}
