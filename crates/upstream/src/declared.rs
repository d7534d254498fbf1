//! An upstream's input request as the 2026-07-28 schema declares it, and as we declared
//! to the upstream: only the fields the schema names (each of the type it names), so
//! nothing an upstream adds on its own (markup, links, keys a client might act on)
//! reaches our client; and only what our client capabilities offer upstreams (form
//! elicitation and sampling without tools or context inclusion; see
//! `connection::client_info`). A request outside that is refused with the reason.

use serde_json::{Map, Value};

/// What a field must be to be kept.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Num,
    Int,
    Strs,
    /// Any JSON object (a free-form map the schema leaves open, such as `metadata`).
    Object,
}

impl Kind {
    fn fits(self, v: &Value) -> bool {
        match self {
            Self::Str => v.is_string(),
            Self::Num => v.is_number(),
            Self::Int => v.is_i64() || v.is_u64(),
            Self::Strs => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Self::Object => v.is_object(),
        }
    }
}

/// The fields of `from` named in `fields`, of the kind named; others are left out.
fn pick(from: &Map<String, Value>, fields: &[(&str, Kind)]) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|(name, kind)| {
            let v = from.get(*name)?;
            kind.fits(v).then(|| ((*name).to_owned(), v.clone()))
        })
        .collect()
}

fn object<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.and_then(Value::as_object)
        .ok_or_else(|| format!("{what} must be an object"))
}

/// `request` (`{"method", "params"}`) reduced to what is declared, or why it cannot be
/// passed on.
pub(crate) fn declared(request: &Value) -> Result<Value, String> {
    let method = request["method"].as_str().unwrap_or_default();
    let params = object(request.get("params"), "params")?;
    let params = match method {
        "elicitation/create" => elicitation(params)?,
        "sampling/createMessage" => sampling(params)?,
        other => return Err(format!("input of a kind we do not pass on ({other:?})")),
    };
    Ok(serde_json::json!({ "method": method, "params": params }))
}

fn elicitation(params: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    match params.get("mode").map(|m| m.as_str().unwrap_or_default()) {
        None | Some("form") => {}
        Some("url") => {
            return Err(
                "URL-mode elicitation, which we do not offer upstreams (we declare form elicitation only)"
                    .into(),
            );
        }
        Some(other) => return Err(format!("elicitation of an unknown mode {other:?}")),
    }
    let mut out = pick(params, &[("mode", Kind::Str), ("message", Kind::Str)]);
    if !out.contains_key("message") {
        return Err("an elicitation without a message".into());
    }
    let schema = object(params.get("requestedSchema"), "requestedSchema")?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("a requestedSchema that is not of type object".into());
    }
    let mut properties = Map::new();
    for (name, property) in object(schema.get("properties"), "requestedSchema.properties")? {
        let property = object(Some(property), &format!("property {name:?}"))?;
        properties.insert(name.clone(), Value::Object(primitive(property)));
    }
    let mut requested = pick(schema, &[("$schema", Kind::Str), ("type", Kind::Str)]);
    requested.insert("properties".into(), Value::Object(properties));
    if let Some(required) = schema.get("required").filter(|r| Kind::Strs.fits(r)) {
        requested.insert("required".into(), required.clone());
    }
    out.insert("requestedSchema".into(), Value::Object(requested));
    Ok(out)
}

/// A form field: the keys of the schema's primitive definitions (string, number, boolean,
/// single- and multi-select enums).
fn primitive(property: &Map<String, Value>) -> Map<String, Value> {
    let mut out = pick(
        property,
        &[
            ("type", Kind::Str),
            ("title", Kind::Str),
            ("description", Kind::Str),
            ("format", Kind::Str),
            ("minLength", Kind::Int),
            ("maxLength", Kind::Int),
            ("minimum", Kind::Num),
            ("maximum", Kind::Num),
            ("enum", Kind::Strs),
            ("enumNames", Kind::Strs),
            ("minItems", Kind::Int),
            ("maxItems", Kind::Int),
        ],
    );
    if let Some(default) = property
        .get("default")
        .filter(|d| d.is_string() || d.is_number() || d.is_boolean() || Kind::Strs.fits(d))
    {
        out.insert("default".into(), default.clone());
    }
    let options = |v: &Value| -> Option<Value> {
        let options = v.as_array()?;
        Some(Value::Array(
            options
                .iter()
                .filter_map(Value::as_object)
                .map(|o| Value::Object(pick(o, &[("const", Kind::Str), ("title", Kind::Str)])))
                .collect(),
        ))
    };
    if let Some(one_of) = property.get("oneOf").and_then(options) {
        out.insert("oneOf".into(), one_of);
    }
    if let Some(items) = property.get("items").and_then(Value::as_object) {
        let mut kept = pick(items, &[("type", Kind::Str), ("enum", Kind::Strs)]);
        if let Some(any_of) = items.get("anyOf").and_then(options) {
            kept.insert("anyOf".into(), any_of);
        }
        out.insert("items".into(), Value::Object(kept));
    }
    out
}

fn sampling(params: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    // The client MUST refuse these unless it declared `sampling.tools`; we declared none.
    for key in ["tools", "toolChoice"] {
        if params.contains_key(key) {
            return Err(format!(
                "sampling with {key:?}, which we do not offer upstreams (no sampling.tools)"
            ));
        }
    }
    let mut out = pick(
        params,
        &[
            ("maxTokens", Kind::Int),
            ("systemPrompt", Kind::Str),
            ("temperature", Kind::Num),
            ("stopSequences", Kind::Strs),
            ("metadata", Kind::Object),
        ],
    );
    if !out.contains_key("maxTokens") {
        return Err("sampling without maxTokens".into());
    }
    // Other servers' context is not ours to offer (no sampling.context).
    if params.get("includeContext").and_then(Value::as_str) == Some("none") {
        out.insert("includeContext".into(), "none".into());
    }
    if let Some(prefs) = params.get("modelPreferences").and_then(Value::as_object) {
        let mut kept = pick(
            prefs,
            &[
                ("costPriority", Kind::Num),
                ("speedPriority", Kind::Num),
                ("intelligencePriority", Kind::Num),
            ],
        );
        if let Some(hints) = prefs.get("hints").and_then(Value::as_array) {
            let hints = hints
                .iter()
                .filter_map(Value::as_object)
                .map(|h| Value::Object(pick(h, &[("name", Kind::Str)])))
                .collect();
            kept.insert("hints".into(), Value::Array(hints));
        }
        out.insert("modelPreferences".into(), Value::Object(kept));
    }
    let messages = params
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("sampling without messages")?;
    let messages = messages
        .iter()
        .map(message)
        .collect::<Result<Vec<Value>, String>>()?;
    out.insert("messages".into(), Value::Array(messages));
    Ok(out)
}

fn message(m: &Value) -> Result<Value, String> {
    let m = object(Some(m), "a sampling message")?;
    let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
    if !matches!(role, "user" | "assistant") {
        return Err(format!("a sampling message of role {role:?}"));
    }
    let content = match m.get("content") {
        Some(Value::Array(blocks)) => {
            Value::Array(blocks.iter().map(block).collect::<Result<_, _>>()?)
        }
        Some(one) => block(one)?,
        None => return Err("a sampling message without content".into()),
    };
    Ok(serde_json::json!({ "role": role, "content": content }))
}

/// Text, image or audio; tool use and results need `sampling.tools`, which we do not offer.
fn block(b: &Value) -> Result<Value, String> {
    let b = object(Some(b), "sampling content")?;
    let fields: &[(&str, Kind)] = match b.get("type").and_then(Value::as_str) {
        Some("text") => &[("type", Kind::Str), ("text", Kind::Str)],
        Some("image" | "audio") => &[
            ("type", Kind::Str),
            ("data", Kind::Str),
            ("mimeType", Kind::Str),
        ],
        other => return Err(format!("sampling content of type {other:?}")),
    };
    let mut out = pick(b, fields);
    if let Some(a) = b.get("annotations").and_then(Value::as_object) {
        let kept = pick(
            a,
            &[
                ("audience", Kind::Strs),
                ("priority", Kind::Num),
                ("lastModified", Kind::Str),
            ],
        );
        out.insert("annotations".into(), Value::Object(kept));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_declared_fields_reach_the_client() {
        let got = declared(&json!({"method": "elicitation/create", "params": {
            "mode": "form", "message": "Name?", "x-html": "<b>", "url": "https://evil",
            "requestedSchema": {"type": "object", "x": 1, "required": ["n"],
                "properties": {"n": {"type": "string", "title": "N", "x-link": "https://evil",
                    "oneOf": [{"const": "a", "title": "A", "href": "https://evil"}]}}}
        }}))
        .expect("declared");
        assert_eq!(
            got,
            json!({"method": "elicitation/create", "params": {
                "mode": "form", "message": "Name?",
                "requestedSchema": {"type": "object", "required": ["n"],
                    "properties": {"n": {"type": "string", "title": "N",
                        "oneOf": [{"const": "a", "title": "A"}]}}}
            }})
        );
        let got = declared(&json!({"method": "sampling/createMessage", "params": {
            "maxTokens": 5, "includeContext": "allServers", "x": 1,
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi", "x": 2}, "_meta": {}}]
        }}))
        .expect("declared");
        assert_eq!(
            got,
            json!({"method": "sampling/createMessage", "params": {
                "maxTokens": 5,
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]
            }})
        );
    }

    #[test]
    fn what_we_do_not_offer_is_refused() {
        for request in [
            json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://x"}}),
            json!({"method": "elicitation/create", "params": {"mode": "form", "message": "m"}}),
            json!({"method": "sampling/createMessage", "params": {"maxTokens": 5, "messages": [], "tools": []}}),
            json!({"method": "sampling/createMessage", "params": {"maxTokens": 5, "messages": [
                {"role": "assistant", "content": {"type": "tool_use", "id": "1", "name": "t", "input": {}}}]}}),
            json!({"method": "roots/list", "params": {}}),
        ] {
            assert!(declared(&request).is_err(), "{request}");
        }
    }
}
