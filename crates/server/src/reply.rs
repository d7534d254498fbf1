//! What a request gets back, before the HTTP layer writes it.

/// One JSON-RPC result, or a response a method built itself: a stream that carries its
/// own frames and ends with the result (`subscriptions/listen`, a 2025-era `tools/call`),
/// or a result with headers of its own (a 2025-era `initialize` names its session).
pub(crate) enum Reply {
    Result(serde_json::Value),
    Stream(axum::response::Response),
}
