//! Per-request protocol checks and method dispatch.

use axum::http::HeaderMap;
use mcp_tasks_store::Owner;
use mcp_tasks_wire::headers::{self, RoutingHeaders};
use mcp_tasks_wire::results::{CacheHint, discover_result};
use mcp_tasks_wire::{ErrorObject, Request, RequestMeta, SUPPORTED_VERSIONS};
use serde_json::{Map, Value, json};

use crate::error::RpcError;
use crate::{AppState, legacy, push, tasks_methods, tools_call, trace};

/// Methods of earlier revisions (or of capabilities this server does not offer) that
/// must answer "method not found" rather than anything that hints they half-work.
const REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "tasks/result",
    "tasks/list",
    "tasks/status",
    "completion/complete",
];

/// What a request gets back: one JSON-RPC result, or (for `subscriptions/listen`) a
/// stream that carries its own frames and ends with the result.
pub(crate) enum Reply {
    Result(Value),
    Stream(axum::response::Response),
}

pub(crate) async fn handle(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    request: Request,
) -> Result<Reply, RpcError> {
    if let Some(result) = legacy::initialize(state, &request) {
        return Ok(Reply::Result(result));
    }

    let meta = RequestMeta::from_params(&request.params).map_err(RpcError::protocol)?;
    let routing = RoutingHeaders {
        protocol_version: single_header(headers, headers::PROTOCOL_VERSION)?,
        method: single_header(headers, headers::METHOD)?,
        name: single_header(headers, headers::NAME)?,
    };
    headers::check_request(routing, &request, Some(&meta.protocol_version))
        .map_err(RpcError::protocol)?;
    if !SUPPORTED_VERSIONS.contains(&meta.protocol_version.as_str()) {
        return Err(RpcError::protocol(ErrorObject::unsupported_version(
            &meta.protocol_version,
            SUPPORTED_VERSIONS,
        )));
    }

    let mut result = match request.method.as_str() {
        "server/discover" => discover(state),
        "tools/list" => list(state, &request, "tools", state.registry().list().clone())?,
        "prompts/list" => list(state, &request, "prompts", json!([]))?,
        "resources/list" => list(state, &request, "resources", json!([]))?,
        "resources/templates/list" => list(state, &request, "resourceTemplates", json!([]))?,
        "prompts/get" => {
            return Err(RpcError::invalid_params(format!(
                "unknown prompt {}: this server has no prompts",
                string_param(&request.params, "name")?
            )));
        }
        "resources/read" => {
            return Err(RpcError::invalid_params(format!(
                "resource not found: {}",
                string_param(&request.params, "uri")?
            )));
        }
        "tools/call" => {
            let trace = trace::for_request(headers);
            let key = idempotency_key(headers)?;
            tools_call::call(state, owner, &meta, &request.params, trace, key).await?
        }
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            tasks_methods::handle(state, owner, &meta, &request.method, &request.params).await?
        }
        "subscriptions/listen" => {
            let stream =
                push::listen::listen(state, owner, &meta, &request.id, &request.params).await?;
            return Ok(Reply::Stream(stream));
        }
        method if REMOVED.contains(&method) => {
            return Err(RpcError::protocol(ErrorObject::method_not_found(method)));
        }
        method => return Err(RpcError::protocol(ErrorObject::method_not_found(method))),
    };
    state.config().server_info.stamp(&mut result, "complete");
    Ok(Reply::Result(Value::Object(result)))
}

fn discover(state: &AppState) -> Map<String, Value> {
    let mut result = discover_result(state.config().instructions.as_deref(), cache_hint(state));
    // Prompts and resources are offered (both empty) so their list methods are real.
    if let Some(caps) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        caps.insert("prompts".into(), json!({}));
        caps.insert("resources".into(), json!({}));
    }
    result
}

fn cache_hint(state: &AppState) -> CacheHint {
    CacheHint {
        ttl_ms: u64::try_from(state.config().cache_ttl.as_millis()).unwrap_or(u64::MAX),
        public: true,
    }
}

/// A list result. Everything fits on one page, so any cursor is one this server never
/// issued.
fn list(
    state: &AppState,
    request: &Request,
    key: &str,
    items: Value,
) -> Result<Map<String, Value>, RpcError> {
    if request.params.get("cursor").is_some_and(|c| !c.is_null()) {
        return Err(RpcError::invalid_params(
            "invalid cursor: this server returns every item on the first page",
        ));
    }
    let mut result = Map::new();
    result.insert(key.into(), items);
    result.insert("resultType".into(), json!("complete"));
    cache_hint(state).apply(&mut result);
    Ok(result)
}

/// A routing header's one value. Two values are refused: a proxy that routes on the
/// other one would read the request differently from this server.
fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a [u8]>, RpcError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(RpcError::protocol(ErrorObject::header_mismatch(format!(
            "the {name} header appears more than once"
        ))));
    }
    Ok(first.map(|v| v.as_bytes()))
}

/// The `Idempotency-Key` header: 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, RpcError> {
    let Some(raw) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = raw.as_bytes();
    if key.is_empty() || key.len() > 255 || !key.iter().all(|b| (0x21..0x7f).contains(b)) {
        return Err(RpcError::protocol(ErrorObject::invalid_request(
            "the Idempotency-Key header must be 1 to 255 visible ASCII characters",
        )));
    }
    Ok(Some(String::from_utf8_lossy(key).into_owned()))
}

/// PostgreSQL cannot store U+0000 in text or jsonb, so params that would be stored must
/// not carry it.
pub(crate) fn refuse_nul(params: &Map<String, Value>, what: &str) -> Result<(), RpcError> {
    if params
        .get(what)
        .is_some_and(mcp_tasks_wire::json::contains_nul)
    {
        return Err(RpcError::invalid_params(format!(
            "params.{what} must not contain the NUL character (U+0000)"
        )));
    }
    Ok(())
}

/// Refuses a param larger than `max` bytes serialized.
pub(crate) fn refuse_larger(
    params: &Map<String, Value>,
    what: &str,
    max: usize,
) -> Result<(), RpcError> {
    if let Some(value) = params.get(what) {
        let size = crate::limits::json_size(value);
        if size > max {
            return Err(RpcError::method(
                ErrorObject::invalid_params(format!(
                    "params.{what} is {size} bytes; the limit is {max}"
                ))
                .with_data(json!({ "limit": what, "max": max })),
            ));
        }
    }
    Ok(())
}

pub(crate) fn string_param<'a>(
    params: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a str, RpcError> {
    match params.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RpcError::invalid_params(format!(
            "params.{key} must be a string"
        ))),
        None => Err(RpcError::invalid_params(format!(
            "params.{key} is required"
        ))),
    }
}
