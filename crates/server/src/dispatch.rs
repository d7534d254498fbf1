//! Per-request protocol checks and method dispatch.

use axum::http::HeaderMap;
use mcp_tasks_store::Owner;
use mcp_tasks_wire::headers::{self, RoutingHeaders};
use mcp_tasks_wire::param_headers::check_param_headers;
use mcp_tasks_wire::results::discover_result;
use mcp_tasks_wire::{ErrorObject, Request, RequestMeta, SUPPORTED_VERSIONS};
use serde_json::{Map, Value};

use crate::catalog::{self, List};
use crate::error::RpcError;
use crate::params::{idempotency_key, single_header};
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
    Complete,
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
            "completion/complete" => Self::Complete,
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
    if request.method == "tools/call" {
        check_tool_headers(state, headers, &request)?;
    }
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
    // Methods of a capability nothing provides are not found, as for any method.
    let offered = catalog::offered(state);
    let available = match method {
        Method::PromptsList | Method::PromptsGet => offered.prompts,
        Method::ResourcesList | Method::ResourceTemplatesList | Method::ResourcesRead => {
            offered.resources
        }
        Method::Complete => offered.completions,
        _ => true,
    };
    if !available {
        return Err(RpcError::protocol(ErrorObject::method_not_found(
            &request.method,
        )));
    }
    let params = &request.params;
    let mut result = match method {
        Method::Discover => discover(state),
        Method::ToolsList => catalog::list(state, List::Tools, params).await?,
        Method::PromptsList => catalog::list(state, List::Prompts, params).await?,
        Method::ResourcesList => catalog::list(state, List::Resources, params).await?,
        Method::ResourceTemplatesList => {
            catalog::list(state, List::ResourceTemplates, params).await?
        }
        Method::PromptsGet => catalog::get_prompt(state, owner, &meta, params).await?,
        Method::ResourcesRead => catalog::read(state, owner, &meta, params).await?,
        Method::Complete => catalog::complete(state, params).await?,
        Method::ToolsCall => {
            let trace = trace::for_request(headers);
            let key = idempotency_key(headers)?;
            tools_call::call(state, owner, &meta, &request.params, trace, key).await?
        }
        Method::Task(method) => {
            // Stamped by the method: `tasks/get` answers with its result serialised.
            return tasks_methods::handle(state, owner, &meta, method, &request.params).await;
        }
        Method::Listen => {
            let stream =
                push::listen::listen(state, owner, headers, &meta, &request.id, &request.params)
                    .await?;
            return Ok(Reply::Stream(stream));
        }
    };
    state.config().server_info.stamp(&mut result, "complete");
    Ok(Reply::Result(Value::Object(result)))
}

fn discover(state: &AppState) -> Map<String, Value> {
    discover_result(
        state.config().instructions.as_deref(),
        catalog::cache_hint(state),
        catalog::offered(state),
    )
}

/// SEP-2243: the `Mcp-Param-*` headers of the tool's `x-mcp-header` parameters must
/// mirror the arguments (`-32020`, HTTP 400, otherwise). An unknown tool or malformed
/// arguments are left to `tools/call` to refuse in its own words.
fn check_tool_headers(
    state: &AppState,
    headers: &HeaderMap,
    request: &Request,
) -> Result<(), RpcError> {
    let Some(name) = request.params.get("name").and_then(Value::as_str) else {
        return Ok(());
    };
    let registry = state.registry();
    let params = registry.header_params(name);
    if params.is_empty() {
        return Ok(());
    }
    let none = Map::new();
    let arguments = match request.params.get("arguments") {
        None | Some(Value::Null) => &none,
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Ok(()),
    };
    let mut raw = Vec::with_capacity(params.len());
    for p in params {
        let header = format!("mcp-param-{}", p.name.to_ascii_lowercase());
        raw.push((header.clone(), single_header(headers, &header)?));
    }
    check_param_headers(params, arguments, |name| {
        raw.iter().find(|(h, _)| h == name).and_then(|(_, v)| *v)
    })
    .map_err(RpcError::protocol)
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
            "completion/complete",
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
