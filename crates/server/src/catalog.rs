//! The registry's catalog on the wire: `resources/list`, `resources/templates/list`,
//! `resources/read`, `prompts/list`, `prompts/get` and `completion/complete`, and the
//! pages of every list (tools too).
//!
//! Lists are paged with an opaque cursor (the list's name and an offset); every replica
//! builds the same catalog, so a cursor from one replica reads the next page on any
//! other. `prompts/get` and `resources/read` may ask for input first (MRTR), under a
//! signed `requestState` bound to the caller, the method, the prompt or URI and the
//! arguments, exactly as `tools/call` does.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use mcp_tasks_store::Owner;
use mcp_tasks_tools::catalog::{CatalogError, CompletionRequest, Fetched, Reference};
use mcp_tasks_wire::results::{CacheHint, Offered, list_result, read_resource_result};
use mcp_tasks_wire::{ErrorObject, RequestMeta, codes};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::RpcError;
use crate::mrtr::{self, Earlier, Round};
use crate::params::string_param;

/// The lists the server pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum List {
    Tools,
    Resources,
    ResourceTemplates,
    Prompts,
}

impl List {
    fn key(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Resources => "resources",
            Self::ResourceTemplates => "resourceTemplates",
            Self::Prompts => "prompts",
        }
    }
}

/// What the registry provides beyond tools.
pub(crate) fn offered(state: &AppState) -> Offered {
    let offers = state.registry().catalog().offers();
    Offered {
        resources: offers.resources,
        prompts: offers.prompts,
        completions: offers.completions,
    }
}

pub(crate) fn cache_hint(state: &AppState) -> CacheHint {
    CacheHint {
        ttl_ms: u64::try_from(state.config().cache_ttl.as_millis()).unwrap_or(u64::MAX),
        public: true,
    }
}

fn catalog_error(e: CatalogError) -> RpcError {
    RpcError::method(e.into_error_object())
}

/// One page of a list.
pub(crate) async fn list(
    state: &AppState,
    list: List,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let registry = state.registry();
    let catalog = registry.catalog();
    let items = match list {
        List::Tools => state
            .registry()
            .list()
            .as_array()
            .cloned()
            .unwrap_or_default(),
        List::Resources => catalog.resources().await.map_err(catalog_error)?,
        List::ResourceTemplates => catalog.resource_templates().await.map_err(catalog_error)?,
        List::Prompts => catalog.prompts().await.map_err(catalog_error)?,
    };
    let size = state.config().list_page_size.max(1);
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => read_cursor(list, cursor)
            .filter(|&offset| offset > 0 && offset < items.len())
            .ok_or_else(|| {
                RpcError::invalid_params("invalid cursor: it is not one this server issued")
            })?,
        Some(_) => return Err(RpcError::invalid_params("params.cursor must be a string")),
    };
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| B64.encode(format!("{}:{end}", list.key())));
    let page = Value::Array(items[start..end].to_vec());
    Ok(list_result(list.key(), page, next, cache_hint(state)))
}

fn read_cursor(list: List, cursor: &str) -> Option<usize> {
    let raw = String::from_utf8(B64.decode(cursor).ok()?).ok()?;
    let (key, offset) = raw.split_once(':')?;
    if key != list.key() {
        return None;
    }
    offset.parse().ok()
}

/// `resources/read`: the contents, or `-32602` with the URI when nobody has it (SEP-2164).
pub(crate) async fn read(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let uri = string_param(params, "uri")?;
    let no_arguments = json!({});
    let round = Round::new(Some("resources/read"), uri, &no_arguments);
    let answers = gathered(&round, state, owner, params)?;
    match state
        .registry()
        .catalog()
        .read(uri, &answers)
        .await
        .map_err(catalog_error)?
    {
        Some(Fetched::Done(contents)) => Ok(read_resource_result(contents, cache_hint(state))),
        Some(Fetched::NeedInput(requests)) => round.ask(state, owner, meta, answers, requests),
        None => Err(RpcError::method(
            ErrorObject::new(codes::INVALID_PARAMS, format!("Resource not found: {uri}"))
                .with_data(json!({ "uri": uri })),
        )),
    }
}

/// `prompts/get`: the rendered prompt, or input it needs first.
pub(crate) async fn get_prompt(
    state: &AppState,
    owner: &Owner,
    meta: &RequestMeta,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let name = string_param(params, "name")?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "params.arguments must be an object",
            ));
        }
    };
    let round_arguments = Value::Object(arguments.clone());
    let round = Round::new(Some("prompts/get"), name, &round_arguments);
    let answers = gathered(&round, state, owner, params)?;
    match state
        .registry()
        .catalog()
        .get_prompt(name, &arguments, &answers)
        .await
        .map_err(catalog_error)?
    {
        Some(Fetched::Done(Value::Object(result))) => Ok(result),
        Some(Fetched::Done(_)) => Err(RpcError::internal()),
        Some(Fetched::NeedInput(requests)) => round.ask(state, owner, meta, answers, requests),
        None => Err(RpcError::invalid_params(format!("unknown prompt {name:?}"))),
    }
}

/// `completion/complete` for a prompt argument or a template variable.
pub(crate) async fn complete(
    state: &AppState,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let reference = params
        .get("ref")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("params.ref must be an object"))?;
    let reference = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => Reference::Prompt(string_param(reference, "name")?.to_owned()),
        Some("ref/resource") => {
            Reference::ResourceTemplate(string_param(reference, "uri")?.to_owned())
        }
        _ => {
            return Err(RpcError::invalid_params(
                "params.ref.type must be \"ref/prompt\" or \"ref/resource\"",
            ));
        }
    };
    let argument = params
        .get("argument")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("params.argument must be an object"))?;
    let context = params
        .get("context")
        .and_then(|c| c.get("arguments"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let request = CompletionRequest {
        reference,
        argument: string_param(argument, "name")?.to_owned(),
        value: string_param(argument, "value")?.to_owned(),
        context,
    };
    let completion = state
        .registry()
        .catalog()
        .complete(&request)
        .await
        .map_err(catalog_error)?
        .ok_or_else(|| {
            RpcError::invalid_params(match &request.reference {
                Reference::Prompt(name) => format!("unknown prompt {name:?}"),
                Reference::ResourceTemplate(uri) => format!("unknown resource template {uri:?}"),
            })
        })?;
    let mut result = Map::new();
    result.insert("completion".into(), completion.to_json());
    Ok(result)
}

/// The answers gathered so far: none without a `requestState` (answers that arrive
/// without one answer nothing this server asked), else the state's plus this round's.
fn gathered(
    round: &Round<'_>,
    state: &AppState,
    owner: &Owner,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    match round.earlier(state, owner, params)? {
        Earlier::First => Ok(Map::new()),
        Earlier::Pre(answers) => Ok(answers),
        Earlier::Task(_) => Err(mrtr::invalid("it was issued for another request")),
    }
}
