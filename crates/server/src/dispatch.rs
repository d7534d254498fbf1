//! Per-request protocol checks and method dispatch.

use axum::http::HeaderMap;
use mcp_tasks_store::Owner;
use mcp_tasks_wire::headers::{self, RoutingHeaders};
use mcp_tasks_wire::results::{CacheHint, discover_result, list_result};
use mcp_tasks_wire::{ErrorObject, Request, RequestMeta, SUPPORTED_VERSIONS};
use serde_json::{Map, Value, json};

use crate::error::RpcError;
use crate::params::{idempotency_key, single_header, string_param};
pub(crate) use crate::reply::Reply;
use crate::tasks_methods::{self, TaskMethod};
use crate::{AppState, legacy, push, session, tools_call, trace};

/// Every method this server answers, named once. Anything else, including the methods
/// of earlier revisions, is "method not found".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Discover,
    ToolsList,
    PromptsList,
    ResourcesList,
    ResourceTemplatesList,
    PromptsGet,
    ResourcesRead,
    ToolsCall,
    Task(TaskMethod),
    Listen,
}

impl Method {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "server/discover" => Self::Discover,
            "tools/list" => Self::ToolsList,
            "prompts/list" => Self::PromptsList,
            "resources/list" => Self::ResourcesList,
            "resources/templates/list" => Self::ResourceTemplatesList,
            "prompts/get" => Self::PromptsGet,
            "resources/read" => Self::ResourcesRead,
            "tools/call" => Self::ToolsCall,
            "tasks/get" => Self::Task(TaskMethod::Get),
            "tasks/update" => Self::Task(TaskMethod::Update),
            "tasks/cancel" => Self::Task(TaskMethod::Cancel),
            "subscriptions/listen" => Self::Listen,
            _ => return None,
        })
    }
}

pub(crate) async fn handle(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    request: Request,
) -> Result<Reply, RpcError> {
    // 2025-era clients: their session stands in for `_meta`, then the same methods run.
    if session::applies(headers, &request) {
        let delegate = |meta: RequestMeta, request: Request| async move {
            run(state, owner, headers, meta, request).await
        };
        return session::handle(state, owner, headers, request, delegate).await;
    }
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
    run(state, owner, headers, meta, request).await
}

/// Runs the method, for a request whose protocol fields have been checked.
async fn run(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    meta: RequestMeta,
    request: Request,
) -> Result<Reply, RpcError> {
    let Some(method) = Method::parse(&request.method) else {
        return Err(RpcError::protocol(ErrorObject::method_not_found(
            &request.method,
        )));
    };
    let mut result = match method {
        Method::Discover => discover(state),
        Method::ToolsList => list(state, &request, "tools", state.registry().list().clone())?,
        Method::PromptsList => list(state, &request, "prompts", json!([]))?,
        Method::ResourcesList => list(state, &request, "resources", json!([]))?,
        Method::ResourceTemplatesList => list(state, &request, "resourceTemplates", json!([]))?,
        Method::PromptsGet => {
            return Err(RpcError::invalid_params(format!(
                "unknown prompt {}: this server has no prompts",
                string_param(&request.params, "name")?
            )));
        }
        Method::ResourcesRead => {
            return Err(RpcError::invalid_params(format!(
                "resource not found: {}",
                string_param(&request.params, "uri")?
            )));
        }
        Method::ToolsCall => {
            let trace = trace::for_request(headers);
            let key = idempotency_key(headers)?;
            tools_call::call(state, owner, &meta, &request.params, trace, key).await?
        }
        Method::Task(method) => {
            tasks_methods::handle(state, owner, &meta, method, &request.params).await?
        }
        Method::Listen => {
            let stream =
                push::listen::listen(state, owner, &meta, &request.id, &request.params).await?;
            return Ok(Reply::Stream(stream));
        }
    };
    state.config().server_info.stamp(&mut result, "complete");
    Ok(Reply::Result(Value::Object(result)))
}

fn discover(state: &AppState) -> Map<String, Value> {
    discover_result(state.config().instructions.as_deref(), cache_hint(state))
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
    Ok(list_result(key, items, cache_hint(state)))
}

#[cfg(test)]
mod tests {
    use super::Method;

    #[test]
    fn earlier_revisions_methods_are_not_found() {
        for removed in [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
            "tasks/result",
            "tasks/list",
            "tasks/status",
            "completion/complete",
            "notifications/initialized",
            "Tools/Call",
            "",
        ] {
            assert_eq!(Method::parse(removed), None, "{removed:?}");
        }
    }

    #[test]
    fn every_method_is_named_once() {
        let names = [
            "server/discover",
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
            "prompts/get",
            "resources/read",
            "tools/call",
            "tasks/get",
            "tasks/update",
            "tasks/cancel",
            "subscriptions/listen",
        ];
        let parsed: Vec<Method> = names.iter().filter_map(|n| Method::parse(n)).collect();
        assert_eq!(parsed.len(), names.len());
        for (i, a) in parsed.iter().enumerate() {
            assert!(!parsed[i + 1..].contains(a), "{a:?} parsed from two names");
        }
    }
}
