//! `initialize` of a 2025-era client: version negotiation as those revisions define it
//! (the requested version when this server speaks it), and a session whose id carries
//! the negotiated version and the client's capabilities, signed.

use std::future::Future;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcp_tasks_store::Owner;
use mcp_tasks_wire::headers::SESSION_ID;
use mcp_tasks_wire::jsonrpc::Response as RpcResponse;
use mcp_tasks_wire::{Request, RequestMeta};
use serde_json::{Map, Value, json};

use super::context::now_ms;
use super::revision::Revision;
use super::token::{self, SessionToken};
use crate::AppState;
use crate::error::RpcError;
use crate::limits::json_size;
use crate::reply::Reply;
use crate::request_state::owner_digest;

/// Client capabilities larger than this are refused: they travel in every request's
/// session id.
const MAX_CAPABILITIES_BYTES: usize = 4 * 1024;

/// The revision an `initialize` asks for, when it is one a session can speak.
pub(crate) fn requested(params: &Map<String, Value>) -> Option<Revision> {
    params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .and_then(Revision::parse)
}

/// Answers `initialize` in the revision asked for and opens a session. The server's
/// capabilities are those `server/discover` offers (run through `delegate`, so both
/// always agree), in this revision's terms.
pub(crate) async fn initialize<F, Fut>(
    state: &AppState,
    owner: &Owner,
    request: Request,
    revision: Revision,
    delegate: F,
) -> Result<Reply, RpcError>
where
    F: FnOnce(RequestMeta, Request) -> Fut,
    Fut: Future<Output = Result<Reply, RpcError>>,
{
    let capabilities = match request.params.get("capabilities") {
        Some(Value::Object(caps)) => caps.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "params.capabilities must be an object",
            ));
        }
        None => return Err(RpcError::invalid_params("params.capabilities is required")),
    };
    let size = json_size(&Value::Object(capabilities.clone()));
    if size > MAX_CAPABILITIES_BYTES {
        return Err(RpcError::invalid_params(format!(
            "params.capabilities is {size} bytes; the limit is {MAX_CAPABILITIES_BYTES}"
        )));
    }

    let discover = Request {
        id: request.id.clone(),
        method: "server/discover".into(),
        params: Map::new(),
    };
    let meta = RequestMeta {
        protocol_version: revision.as_str().into(),
        client_capabilities: mcp_tasks_wire::ClientCapabilities::default(),
        client_info: None,
        progress_token: None,
    };
    let Reply::Result(discovered) = delegate(meta, discover).await? else {
        return Err(RpcError::internal());
    };
    let mut server_caps = discovered
        .get("capabilities")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // Extensions are declared per request in 2026-07-28; a session has none.
    server_caps.remove("extensions");
    if revision.has_tasks() {
        server_caps.insert(
            "tasks".into(),
            json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } }),
        );
    }

    let issued_ms = now_ms();
    let ttl_ms = i64::try_from(state.config().session_ttl.as_millis()).unwrap_or(i64::MAX);
    let session = SessionToken {
        version: revision.as_str().into(),
        capabilities,
        owner: owner_digest(owner),
        nonce: token::nonce(),
        issued_ms,
        expires_ms: issued_ms.saturating_add(ttl_ms),
    };
    let mut result = Map::new();
    result.insert("protocolVersion".into(), json!(revision.as_str()));
    result.insert("capabilities".into(), Value::Object(server_caps));
    result.insert("serverInfo".into(), json!(state.config().server_info));
    if let Some(instructions) = discovered.get("instructions") {
        result.insert("instructions".into(), instructions.clone());
    }
    tracing::info!(
        %revision,
        client = ?request.params.get("clientInfo").and_then(|c| c.get("name")),
        "session started"
    );
    let body = RpcResponse::result(request.id, Value::Object(result)).to_json();
    let mut response: Response = (StatusCode::OK, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let id = HeaderValue::from_str(&session.sign(state.state_keys()))
        .map_err(|_| RpcError::internal())?;
    headers.insert(SESSION_ID, id);
    Ok(Reply::Stream(response))
}
