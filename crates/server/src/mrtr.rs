//! The signed `requestState` of an MRTR exchange, alike for `tools/call`, `prompts/get`
//! and `resources/read`: a round that asks for input signs what it asked, bound to the
//! caller, the method, the tool (or prompt, or URI) and the arguments; the next round
//! checks all of that and carries the answers forward.

use mcp_tasks_store::Owner;
use mcp_tasks_tools::InputRequests;
use mcp_tasks_wire::ErrorObject;
use mcp_tasks_wire::RequestMeta;
use mcp_tasks_wire::results::input_required_result;
use serde_json::{Map, Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::AppState;
use crate::answers::gather_for_round;
use crate::error::RpcError;
use crate::request_state::{RequestState, StateKind, owner_digest, value_digest};

/// One round of a request that may ask for input before it is answered.
pub(crate) struct Round<'a> {
    /// `None` for `tools/call`, whose state names no method.
    method: Option<&'static str>,
    name: &'a str,
    /// Digested only when a state is read or signed: most calls carry none.
    arguments: &'a Value,
}

/// What came before this round, by its `requestState`.
pub(crate) enum Earlier {
    /// No `requestState`: nothing was asked yet. Any `inputResponses` without a state
    /// are ignored, since nothing says they answer requests this server made.
    First,
    /// The answers gathered before any task exists, this round's included.
    Pre(Map<String, Value>),
    /// The id of a task run for a client without the Tasks extension, paused for input.
    Task(String),
}

impl<'a> Round<'a> {
    pub(crate) fn new(method: Option<&'static str>, name: &'a str, arguments: &'a Value) -> Self {
        Self {
            method,
            name,
            arguments,
        }
    }

    /// Reads and checks the `requestState` of `params`: issued by this server, to this
    /// caller, for this request, not expired, for the same arguments.
    pub(crate) fn earlier(
        &self,
        state: &AppState,
        owner: &Owner,
        params: &Map<String, Value>,
    ) -> Result<Earlier, RpcError> {
        let token = match params.get("requestState") {
            None | Some(Value::Null) => return Ok(Earlier::First),
            Some(Value::String(token)) => token,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "params.requestState must be a string",
                ));
            }
        };
        let rs = state.state_keys().verify(token).map_err(invalid)?;
        let (what, redo) = match self.method {
            Some(_) => ("request", "send the request"),
            None => ("tool", "call the tool"),
        };
        if rs.owner != owner_digest(owner)
            || rs.method.as_deref() != self.method
            || rs.tool != self.name
        {
            return Err(invalid(&format!(
                "it was issued for another caller or {what}"
            )));
        }
        if rs.expires_ms < now_ms() {
            return Err(invalid(&format!("it has expired; {redo} again without it")));
        }
        match rs.kind {
            StateKind::Task { task } => Ok(Earlier::Task(task)),
            StateKind::Pre {
                args,
                mut answers,
                pending,
            } => {
                if args != value_digest(self.arguments) {
                    return Err(invalid("the arguments changed since it was issued"));
                }
                gather_for_round(params, &pending, &mut answers)?;
                Ok(Earlier::Pre(answers))
            }
        }
    }

    /// The MRTR answer asking for `requests`, with a signed state that carries `answers`
    /// to the next round.
    pub(crate) fn ask(
        &self,
        state: &AppState,
        owner: &Owner,
        meta: &RequestMeta,
        answers: Map<String, Value>,
        requests: InputRequests,
    ) -> Result<Map<String, Value>, RpcError> {
        ensure_client_can_answer(meta, requests.as_map())?;
        let kind = StateKind::Pre {
            args: value_digest(self.arguments),
            answers,
            pending: requests.as_map().clone(),
        };
        let token = sign(state, owner, self.method, self.name, kind);
        Ok(input_required_result(requests.into_map(), token))
    }
}

/// A `requestState` for `owner`'s request (`method`, `None` for `tools/call`) of `name`,
/// valid for the replica's `request_state_ttl`.
pub(crate) fn sign(
    state: &AppState,
    owner: &Owner,
    method: Option<&str>,
    name: &str,
    kind: StateKind,
) -> String {
    state.state_keys().sign(&RequestState {
        tool: name.to_owned(),
        method: method.map(str::to_owned),
        owner: owner_digest(owner),
        expires_ms: now_ms() + millis(state.config().request_state_ttl),
        kind,
    })
}

/// A `requestState` this request cannot use, and why.
pub(crate) fn invalid(why: &str) -> RpcError {
    RpcError::invalid_params(format!("invalid requestState: {why}"))
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// A server must not ask for input of a kind the client did not declare.
pub(crate) fn ensure_client_can_answer(
    meta: &RequestMeta,
    requests: &Map<String, Value>,
) -> Result<(), RpcError> {
    let mut missing = Map::new();
    for request in requests.values() {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !meta
            .client_capabilities
            .can_answer(method, request.get("params"))
        {
            let capability = match method {
                "sampling/createMessage" => "sampling",
                "roots/list" => "roots",
                _ => "elicitation",
            };
            missing.insert(capability.into(), json!({}));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(RpcError::method(ErrorObject::missing_capability(
            "This request needs input the client did not declare it can provide",
            Value::Object(missing),
        )))
    }
}
