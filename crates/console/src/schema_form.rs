//! Input requests as forms, and form posts back as answers.
//!
//! An `elicitation/create` request's `requestedSchema` (a flat object of primitive
//! properties, as MCP restricts it) becomes one input per property: a checkbox for a
//! boolean, a select for an enum, a number input for a number or integer, a text input
//! for a string; required properties are marked `required` (except booleans: an
//! unticked box is an answer too). Accept, decline and cancel are the three buttons.
//! Requests of other kinds (sampling, roots), and schemas a form cannot express, are
//! shown but can only be declined here. The answer is checked against the schema by
//! the same validator `tasks/update` uses, when it is applied.

use maud::{Markup, html};
use serde_json::{Map, Number, Value, json};

use super::form::Form;

/// Form field names of schema properties: prefixed, so no property can pose as `csrf`,
/// `key` or `action`.
const FIELD: &str = "field.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Boolean,
    Integer,
    Number,
    Text,
    Choice,
}

struct Field<'a> {
    name: &'a str,
    kind: Kind,
    title: Option<&'a str>,
    description: Option<&'a str>,
    required: bool,
    choices: Vec<(String, String)>,
    schema: &'a Map<String, Value>,
}

/// The fields of a request's schema, or `None` when a form cannot express it.
fn fields(request: &Value) -> Option<Vec<Field<'_>>> {
    if request.get("method").and_then(Value::as_str) != Some("elicitation/create") {
        return None;
    }
    let Some(schema) = request.pointer("/params/requestedSchema") else {
        return Some(Vec::new());
    };
    let schema = schema.as_object()?;
    let required: Vec<&str> = match schema.get("required") {
        None => Vec::new(),
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        Some(_) => return None,
    };
    let properties = match schema.get("properties") {
        None => return Some(Vec::new()),
        Some(Value::Object(p)) => p,
        Some(_) => return None,
    };
    properties
        .iter()
        .map(|(name, property)| {
            let property = property.as_object()?;
            let text = |k: &str| property.get(k).and_then(Value::as_str);
            let choices = choices(property);
            let kind = match (text("type"), choices.is_empty()) {
                (Some("string") | None, false) => Kind::Choice,
                (Some("string"), true) => Kind::Text,
                (Some("boolean"), _) => Kind::Boolean,
                (Some("integer"), _) => Kind::Integer,
                (Some("number"), _) => Kind::Number,
                _ => return None,
            };
            Some(Field {
                name,
                kind,
                title: text("title"),
                description: text("description"),
                required: required.contains(&name.as_str()),
                choices,
                schema: property,
            })
        })
        .collect()
}

/// `(value, label)` of an enum: `enum` (with `enumNames`), or `oneOf` of `const`s.
fn choices(property: &Map<String, Value>) -> Vec<(String, String)> {
    if let Some(Value::Array(values)) = property.get("enum") {
        let names = property.get("enumNames").and_then(Value::as_array);
        return values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let v = v.as_str()?;
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .unwrap_or(v);
                Some((v.to_owned(), label.to_owned()))
            })
            .collect();
    }
    if let Some(Value::Array(options)) = property.get("oneOf") {
        return options
            .iter()
            .filter_map(|o| {
                let v = o.get("const")?.as_str()?;
                let label = o.get("title").and_then(Value::as_str).unwrap_or(v);
                Some((v.to_owned(), label.to_owned()))
            })
            .collect();
    }
    Vec::new()
}

/// One pending request as a form posting to the task's answer route.
pub(crate) fn render(task: &str, key: &str, request: &Value, csrf: &str) -> Markup {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("an unknown request");
    let message = request.pointer("/params/message").and_then(Value::as_str);
    let fields = fields(request);
    html! {
        form .task-answer method="post" action={ "/console/tasks/" (task) "/answer" } data-key=(key) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="key" value=(key);
            @if let Some(message) = message { p .input-message { (message) } }
            @match &fields {
                Some(fields) => {
                    @for field in fields { (input(field)) }
                    button type="submit" name="action" value="accept" { "Accept" }
                    " "
                }
                None => p .input-unsupported {
                    "This request (" (method) ") cannot be answered with a form here; an MCP client can answer it."
                },
            }
            button type="submit" name="action" value="decline" formnovalidate { "Decline" }
            " "
            button type="submit" name="action" value="cancel" formnovalidate { "Cancel" }
        }
    }
}

fn input(field: &Field<'_>) -> Markup {
    let name = format!("{FIELD}{}", field.name);
    let label = field.title.unwrap_or(field.name);
    let default = field.schema.get("default");
    let number = |k: &str| {
        field
            .schema
            .get(k)
            .and_then(Value::as_f64)
            .map(|n| n.to_string())
    };
    let length = |k: &str| field.schema.get(k).and_then(Value::as_u64);
    html! {
        label {
            (label)
            @if field.required && field.kind != Kind::Boolean { " *" }
            " "
            @match field.kind {
                Kind::Boolean => input type="checkbox" name=(name) value="true"
                    checked[default == Some(&Value::Bool(true))];
                Kind::Choice => select name=(name) required[field.required] {
                    @if !field.required { option value="" { "" } }
                    @for (value, text) in &field.choices {
                        option value=(value) selected[default.and_then(Value::as_str) == Some(value.as_str())] { (text) }
                    }
                },
                Kind::Integer | Kind::Number => input type="number" name=(name)
                    step=(if field.kind == Kind::Integer { "1" } else { "any" })
                    min=[number("minimum")] max=[number("maximum")]
                    value=[default.filter(|d| d.is_number()).map(Value::to_string)]
                    required[field.required];
                Kind::Text => input type="text" name=(name)
                    minlength=[length("minLength")] maxlength=[length("maxLength")]
                    value=[default.and_then(Value::as_str)]
                    required[field.required];
            }
            @if let Some(description) = field.description { " " small { (description) } }
        }
    }
}

/// The answer a posted form gives `request`: `{action}` and, when accepted, `content`
/// from the schema's fields. `Err` says what in the form is wrong.
pub(crate) fn answer(request: &Value, form: &Form) -> Result<Value, String> {
    let action = form.get("action").unwrap_or("accept");
    match action {
        "decline" | "cancel" => return Ok(json!({ "action": action })),
        "accept" => {}
        other => return Err(format!("unknown action {other:?}")),
    }
    let Some(fields) = fields(request) else {
        return Err("this request cannot be accepted with a form; decline or cancel it".into());
    };
    let mut content = Map::new();
    for field in &fields {
        let name = format!("{FIELD}{}", field.name);
        let raw = form.get(&name).map(str::trim);
        let value = match field.kind {
            Kind::Boolean => Some(Value::Bool(form.has(&name))),
            _ if raw.is_none_or(str::is_empty) => None,
            Kind::Integer => {
                let raw = raw.unwrap_or_default();
                let n: i64 = raw
                    .parse()
                    .map_err(|_| format!("{}: {raw:?} is not a whole number", field.name))?;
                Some(Value::from(n))
            }
            Kind::Number => {
                let raw = raw.unwrap_or_default();
                let n = raw
                    .parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .ok_or_else(|| format!("{}: {raw:?} is not a number", field.name))?;
                Some(Value::Number(n))
            }
            Kind::Text | Kind::Choice => raw.map(|s| Value::String(s.to_owned())),
        };
        if let Some(value) = value {
            content.insert(field.name.to_owned(), value);
        }
    }
    Ok(json!({ "action": "accept", "content": content }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(schema: Value) -> Value {
        json!({ "method": "elicitation/create", "params": { "message": "m", "requestedSchema": schema } })
    }

    #[test]
    fn every_primitive_becomes_an_input() {
        let r = request(json!({
            "type": "object",
            "properties": {
                "ok": { "type": "boolean" },
                "name": { "type": "string", "minLength": 1 },
                "n": { "type": "integer", "minimum": 1 },
                "x": { "type": "number" },
                "color": { "type": "string", "enum": ["red", "blue"] }
            },
            "required": ["name", "n"]
        }));
        let html = render("t", "k", &r, "c").into_string();
        assert!(
            html.contains(r#"type="checkbox" name="field.ok""#),
            "{html}"
        );
        assert!(
            html.contains(r#"type="text" name="field.name" minlength="1" required"#),
            "{html}"
        );
        assert!(
            html.contains(r#"type="number" name="field.n" step="1" min="1" required"#),
            "{html}"
        );
        assert!(html.contains(r#"<select name="field.color">"#), "{html}");
        assert!(html.contains(r#"data-key="k""#), "{html}");
    }

    #[test]
    fn bad_schemas_make_no_form_and_no_panic() {
        for schema in [
            json!("x"),
            json!({ "properties": 3 }),
            json!({ "properties": { "a": { "type": "array" } } }),
            json!({ "required": "a" }),
        ] {
            let r = request(schema);
            assert!(
                render("t", "k", &r, "c")
                    .into_string()
                    .contains("input-unsupported")
            );
            assert!(answer(&r, &Form::default()).is_err());
        }
        let sampling = json!({ "method": "sampling/createMessage" });
        assert!(
            render("t", "k", &sampling, "c")
                .into_string()
                .contains("input-unsupported")
        );
    }
}
