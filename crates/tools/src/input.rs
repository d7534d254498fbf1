//! Input requests a tool issues and the validation of the answers it gets back.

use serde_json::{Map, Value, json};

/// A set of input requests, keyed. Keys must be unique over a task's lifetime.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputRequests(Map<String, Value>);

impl InputRequests {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an `elicitation/create` form request. `requested_schema` is a flat object
    /// schema of primitive properties, as the spec restricts elicitation forms.
    #[must_use]
    pub fn elicit(
        mut self,
        key: impl Into<String>,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> Self {
        self.0.insert(
            key.into(),
            json!({
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": message.into(),
                    "requestedSchema": requested_schema,
                }
            }),
        );
        self
    }

    /// Adds any input request (`{"method": …, "params": …}`).
    #[must_use]
    pub fn request(mut self, key: impl Into<String>, request: Value) -> Self {
        self.0.insert(key.into(), request);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter()
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.0
    }
}

/// Checks one answer against the request it answers.
///
/// - `elicitation/create`: an `ElicitResult`; on `accept`, `content` must satisfy the
///   request's `requestedSchema`.
/// - `sampling/createMessage`: a `CreateMessageResult` (`role`, `content`, `model`).
/// - `roots/list`: a `ListRootsResult` (`roots` array).
pub fn validate_input_response(request: &Value, response: &Value) -> Result<(), String> {
    let Some(response) = response.as_object() else {
        return Err("the answer must be an object".into());
    };
    match request.get("method").and_then(Value::as_str) {
        Some("elicitation/create") => {
            let action = response.get("action").and_then(Value::as_str).ok_or(
                "an elicitation answer needs \"action\": \"accept\", \"decline\" or \"cancel\"",
            )?;
            match action {
                "accept" => {
                    let content = response.get("content").cloned().unwrap_or(json!({}));
                    if !content.is_object() {
                        return Err("\"content\" must be an object".into());
                    }
                    let Some(schema) = request.pointer("/params/requestedSchema") else {
                        return Ok(());
                    };
                    let validator = jsonschema::validator_for(schema)
                        .map_err(|e| format!("the request's requestedSchema is invalid: {e}"))?;
                    let errors: Vec<String> = validator
                        .iter_errors(&content)
                        .take(3)
                        .map(|e| describe(&e))
                        .collect();
                    if errors.is_empty() {
                        Ok(())
                    } else {
                        Err(format!(
                            "\"content\" does not match the requested schema: {}",
                            errors.join("; ")
                        ))
                    }
                }
                "decline" | "cancel" => Ok(()),
                other => Err(format!(
                    "unknown elicitation action {other:?}; expected accept, decline or cancel"
                )),
            }
        }
        Some("sampling/createMessage") => {
            for field in ["role", "content", "model"] {
                if !response.contains_key(field) {
                    return Err(format!("a sampling answer needs \"{field}\""));
                }
            }
            Ok(())
        }
        Some("roots/list") => match response.get("roots") {
            Some(Value::Array(_)) => Ok(()),
            _ => Err("a roots answer needs a \"roots\" array".into()),
        },
        _ => Ok(()),
    }
}

/// A validation error in words, with where it is but without the offending value (it
/// may be large, or secret).
pub(crate) fn describe(e: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as K;
    let what = match e.kind() {
        K::Required { property } => format!("missing required property {property}"),
        K::Type { kind } => format!("must be of type {kind:?}"),
        K::Enum { options } => format!("must be one of {options}"),
        K::AdditionalProperties { unexpected } => {
            format!("unexpected properties {}", unexpected.join(", "))
        }
        K::Minimum { limit } => format!("must be at least {limit}"),
        K::Maximum { limit } => format!("must be at most {limit}"),
        K::MinLength { limit } => format!("must be at least {limit} characters"),
        K::MaxLength { limit } => format!("must be at most {limit} characters"),
        _ => "does not match the schema".to_owned(),
    };
    let at = e.instance_path().to_string();
    if at.is_empty() {
        what
    } else {
        format!("{at}: {what}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirm() -> Value {
        InputRequests::new()
            .elicit(
                "k",
                "Sure?",
                json!({"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}),
            )
            .as_map()["k"]
            .clone()
    }

    #[test]
    fn elicitation_answers() {
        let req = confirm();
        assert!(
            validate_input_response(&req, &json!({"action":"accept","content":{"confirm":true}}))
                .is_ok()
        );
        assert!(
            validate_input_response(
                &req,
                &json!({"action":"accept","content":{"confirm":true,"name":"x"}})
            )
            .is_ok()
        );
        assert!(validate_input_response(&req, &json!({"action":"decline"})).is_ok());
        let err = validate_input_response(
            &req,
            &json!({"action":"accept","content":{"confirm":"secret-yes"}}),
        )
        .unwrap_err();
        assert!(
            err.contains("/confirm") && !err.contains("secret-yes"),
            "{err}"
        );
        assert!(validate_input_response(&req, &json!({"action":"accept","content":{}})).is_err());
        assert!(validate_input_response(&req, &json!({"action":"maybe"})).is_err());
        assert!(validate_input_response(&req, &json!({"ignored":true})).is_err());
        assert!(validate_input_response(&req, &json!(5)).is_err());
    }

    #[test]
    fn other_kinds() {
        let sampling = json!({"method":"sampling/createMessage","params":{}});
        assert!(
            validate_input_response(
                &sampling,
                &json!({"role":"assistant","content":{},"model":"m"})
            )
            .is_ok()
        );
        assert!(validate_input_response(&sampling, &json!({"role":"assistant"})).is_err());
        let roots = json!({"method":"roots/list"});
        assert!(validate_input_response(&roots, &json!({"roots":[]})).is_ok());
        assert!(validate_input_response(&roots, &json!({})).is_err());
    }
}
