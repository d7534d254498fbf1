//! Per-request `_meta`: the 2026-07-28 core makes every request self-describing, so a
//! replica never needs to remember anything about a client between requests.

use serde_json::{Map, Value};

use crate::{ErrorObject, TASKS_EXTENSION, meta_keys};

/// The required and optional protocol fields of one request's `params._meta`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta {
    pub protocol_version: String,
    pub client_capabilities: ClientCapabilities,
    pub client_info: Option<Value>,
    pub progress_token: Option<Value>,
}

impl RequestMeta {
    /// Reads `params._meta`. A missing or mistyped required field is `-32602`, which the
    /// HTTP layer sends with status 400.
    pub fn from_params(params: &Map<String, Value>) -> Result<Self, ErrorObject> {
        let meta = match params.get("_meta") {
            Some(Value::Object(meta)) => meta,
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "params._meta must be an object",
                ));
            }
            None => {
                return Err(ErrorObject::invalid_params(
                    "params._meta is required (with io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities)",
                ));
            }
        };
        let protocol_version = match meta.get(meta_keys::PROTOCOL_VERSION) {
            Some(Value::String(v)) => v.clone(),
            Some(_) => {
                return Err(ErrorObject::invalid_params(format!(
                    "_meta[\"{}\"] must be a string",
                    meta_keys::PROTOCOL_VERSION
                )));
            }
            None => {
                return Err(ErrorObject::invalid_params(format!(
                    "_meta[\"{}\"] is required",
                    meta_keys::PROTOCOL_VERSION
                )));
            }
        };
        let client_capabilities = match meta.get(meta_keys::CLIENT_CAPABILITIES) {
            Some(Value::Object(caps)) => ClientCapabilities(caps.clone()),
            Some(_) => {
                return Err(ErrorObject::invalid_params(format!(
                    "_meta[\"{}\"] must be an object",
                    meta_keys::CLIENT_CAPABILITIES
                )));
            }
            None => {
                return Err(ErrorObject::invalid_params(format!(
                    "_meta[\"{}\"] is required",
                    meta_keys::CLIENT_CAPABILITIES
                )));
            }
        };
        Ok(Self {
            protocol_version,
            client_capabilities,
            client_info: meta.get(meta_keys::CLIENT_INFO).cloned(),
            progress_token: meta.get("progressToken").cloned(),
        })
    }
}

/// The capabilities a client declared on one request. Never inferred from another request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClientCapabilities(pub Map<String, Value>);

impl ClientCapabilities {
    /// True when `extensions[id]` is present. A legacy top-level `tasks` capability
    /// (2025-11-25) does not count.
    pub fn declares_extension(&self, id: &str) -> bool {
        self.0
            .get("extensions")
            .and_then(Value::as_object)
            .is_some_and(|ext| ext.get(id).is_some_and(Value::is_object))
    }

    pub fn declares_tasks(&self) -> bool {
        self.declares_extension(TASKS_EXTENSION)
    }

    /// True when the client declared every capability named in `required`, a
    /// `ClientCapabilities`-shaped object such as `{"sampling":{}}` or
    /// `{"elicitation":{"form":{}}}`.
    pub fn satisfies(&self, required: &Value) -> bool {
        fn covers(have: &Value, want: &Value) -> bool {
            match (have, want) {
                (Value::Object(have), Value::Object(want)) => want.iter().all(|(k, w)| {
                    have.get(k).is_some_and(|h| {
                        // An empty requirement object only asks for presence.
                        w.as_object().is_some_and(Map::is_empty) || covers(h, w)
                    })
                }),
                _ => true,
            }
        }
        covers(&Value::Object(self.0.clone()), required)
    }

    /// Whether the client can answer an `InputRequest` of this method.
    pub fn can_answer(&self, method: &str, params: Option<&Value>) -> bool {
        match method {
            "elicitation/create" => {
                let Some(elicitation) = self.0.get("elicitation").and_then(Value::as_object) else {
                    return false;
                };
                let mode = params
                    .and_then(|p| p.get("mode"))
                    .and_then(Value::as_str)
                    .unwrap_or("form");
                // A bare `elicitation: {}` declares form support (the schema's default).
                match mode {
                    "url" => elicitation.contains_key("url"),
                    _ => elicitation.is_empty() || elicitation.contains_key("form"),
                }
            }
            "sampling/createMessage" => self.0.contains_key("sampling"),
            "roots/list" => self.0.contains_key("roots"),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn required_fields() {
        let ok = RequestMeta::from_params(&params(json!({"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":{}
        }})))
        .unwrap();
        assert_eq!(ok.protocol_version, "2026-07-28");
        assert!(!ok.client_capabilities.declares_tasks());

        for bad in [
            json!({}),
            json!({"_meta": 1}),
            json!({"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}),
            json!({"_meta":{"io.modelcontextprotocol/protocolVersion":20260728,"io.modelcontextprotocol/clientCapabilities":{}}}),
            json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}),
            json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}}),
        ] {
            assert_eq!(
                RequestMeta::from_params(&params(bad.clone()))
                    .unwrap_err()
                    .code,
                -32602,
                "{bad}"
            );
        }
    }

    #[test]
    fn tasks_declaration() {
        let caps = ClientCapabilities(params(
            json!({"extensions":{"io.modelcontextprotocol/tasks":{}}}),
        ));
        assert!(caps.declares_tasks());
        let legacy = ClientCapabilities(params(json!({"tasks":{"requests":{}}})));
        assert!(!legacy.declares_tasks());
    }

    #[test]
    fn satisfies_and_answers() {
        let caps = ClientCapabilities(params(json!({"elicitation":{}, "sampling":{}})));
        assert!(caps.satisfies(&json!({"sampling":{}})));
        assert!(!caps.satisfies(&json!({"roots":{}})));
        assert!(caps.can_answer("elicitation/create", Some(&json!({"mode":"form"}))));
        assert!(!caps.can_answer("elicitation/create", Some(&json!({"mode":"url"}))));
        assert!(!caps.can_answer("roots/list", None));
    }
}
