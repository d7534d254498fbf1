//! Input requests as forms, and form posts back as answers.
//!
//! An `elicitation/create` request's `requestedSchema` is read by the model the CLI reads
//! it with (`mcp_tasks_wire::requested_schema`), so both accept and refuse the same
//! schemas. Each field becomes one input: a checkbox for a boolean, a select for a
//! single-select enum, checkboxes for a multi-select, a number input for a number or
//! integer, a text input for a string; required fields are marked `required` (except
//! booleans and multi-selects: an unticked box is an answer too, and the number of ticks is
//! checked on the post). Accept, decline and cancel are the three buttons. Requests of
//! other kinds (sampling, roots), and schemas the model refuses, are shown with the reason
//! but can only be declined here. The answer is checked against the schema by the same
//! validator `tasks/update` uses, when it is applied.

use maud::{Markup, html};
use mcp_tasks_wire::requested_schema::{Field, Kind, RequestedSchema};
use serde_json::{Map, Value, json};

use super::form::Form;

/// Form field names of schema properties: prefixed, so no property can pose as `csrf`,
/// `key` or `action`.
const FIELD: &str = "field.";
/// A multi-select's checkboxes: `option.<choice index>.<property>`, apart from `field.`.
const OPTION: &str = "option.";

/// The fields of a request's schema, or why a form cannot express the request.
fn fields(request: &Value) -> Result<Vec<Field>, String> {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("an unknown request");
    if method != "elicitation/create" {
        return Err(format!(
            "This request ({method}) cannot be answered with a form here"
        ));
    }
    RequestedSchema::parse(request.pointer("/params/requestedSchema"))
        .map(|s| s.fields)
        .map_err(|e| format!("This request cannot be answered here: {e}"))
}

/// One pending request as a form posting to the task's answer route.
pub(crate) fn render(task: &str, key: &str, request: &Value, csrf: &str) -> Markup {
    let message = request.pointer("/params/message").and_then(Value::as_str);
    let fields = fields(request);
    html! {
        form .task-answer method="post" action={ "/console/tasks/" (task) "/answer" } data-key=(key) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="key" value=(key);
            @if let Some(message) = message { p .input-message { (message) } }
            @match &fields {
                Ok(fields) => {
                    @for field in fields { (input(field)) }
                    button type="submit" name="action" value="accept" { "Accept" }
                    " "
                }
                Err(why) => p .input-unsupported {
                    (why) "; an MCP client can answer it."
                },
            }
            button type="submit" name="action" value="decline" formnovalidate { "Decline" }
            " "
            button type="submit" name="action" value="cancel" formnovalidate { "Cancel" }
        }
    }
}

fn input(field: &Field) -> Markup {
    let name = format!("{FIELD}{}", field.name);
    let marked = field.required && !matches!(field.kind, Kind::Boolean { .. });
    html! {
        label {
            (field.label())
            @if marked { " *" }
            " "
            @match &field.kind {
                Kind::Boolean { default } => input type="checkbox" name=(name) value="true"
                    checked[*default == Some(true)];
                Kind::Select { choices, default } => select name=(name) required[field.required] {
                    @if !field.required { option value="" { "" } }
                    @for c in choices {
                        option value=(c.value) selected[default.as_deref() == Some(c.value.as_str())] { (c.label) }
                    }
                },
                Kind::MultiSelect { choices, default, .. } => span .input-choices {
                    @for (i, c) in choices.iter().enumerate() {
                        label {
                            input type="checkbox" name={ (OPTION) (i) "." (field.name) } value="true"
                                checked[default.contains(&c.value)];
                            " " (c.label)
                        }
                        " "
                    }
                },
                Kind::Number { integer, minimum, maximum, default } => input type="number" name=(name)
                    step=(if *integer { "1" } else { "any" })
                    min=[minimum.map(|n| n.to_string())] max=[maximum.map(|n| n.to_string())]
                    value=[default.as_ref().map(ToString::to_string)]
                    required[field.required];
                Kind::Text { min_length, max_length, default, .. } => input type="text" name=(name)
                    minlength=[*min_length] maxlength=[*max_length]
                    value=[default.as_deref()]
                    required[field.required];
            }
            @if let Some(description) = &field.description { " " small { (description) } }
        }
    }
}

/// The answer a posted form gives `request`: `{action}` and, when accepted, `content`
/// from the schema's fields. `Err` says what in the form is wrong.
pub(crate) fn answer(request: &Value, form: &Form) -> Result<Value, String> {
    answer_with(request, |name| form.get(name))
}

/// [`answer`], reading the post's fields through `get` (the first value of a name).
fn answer_with<'f>(
    request: &Value,
    get: impl Fn(&str) -> Option<&'f str>,
) -> Result<Value, String> {
    let has = |name: &str| get(name).is_some();
    let action = get("action").unwrap_or("accept");
    match action {
        "decline" | "cancel" => return Ok(json!({ "action": action })),
        "accept" => {}
        other => return Err(format!("unknown action {other:?}")),
    }
    let fields = fields(request).map_err(|why| format!("{why}; decline or cancel it"))?;
    let mut content = Map::new();
    for field in &fields {
        let name = format!("{FIELD}{}", field.name);
        let raw = get(&name).map(str::trim);
        let value = match &field.kind {
            Kind::Boolean { .. } => Some(Ok(Value::Bool(has(&name)))),
            Kind::MultiSelect { choices, .. } => {
                let chosen: Vec<usize> = (0..choices.len())
                    .filter(|i| has(&format!("{OPTION}{i}.{}", field.name)))
                    .collect();
                // Nothing ticked on an optional field is no answer, as an empty text is.
                if chosen.is_empty() && !field.required {
                    None
                } else {
                    Some(field.read_choices(&chosen))
                }
            }
            _ => raw.filter(|r| !r.is_empty()).map(|r| field.read_text(r)),
        };
        if let Some(value) = value {
            let value = value.map_err(|why| format!("{}: {why}", field.name))?;
            content.insert(field.name.clone(), value);
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
        let why = render(
            "t",
            "k",
            &request(json!({ "properties": { "a": { "type": "array" } } })),
            "c",
        )
        .into_string();
        assert!(
            why.contains("property &quot;a&quot;: an array without"),
            "{why}"
        );
        let sampling = json!({ "method": "sampling/createMessage" });
        assert!(
            render("t", "k", &sampling, "c")
                .into_string()
                .contains("input-unsupported")
        );
    }

    /// The official multi-select example, which the CLI's prompt tests read too: both
    /// offer its three labelled choices and answer with the chosen values.
    const MULTI_SELECT: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wire/tests/official/examples/TitledMultiSelectEnumSchema/titled-color-multi-select-schema.json"
    ));

    #[test]
    fn a_multi_select_is_a_row_of_checkboxes_and_answers_with_the_values_ticked() {
        let property: Value = serde_json::from_str(MULTI_SELECT).expect("the example");
        let r = request(
            json!({ "type": "object", "properties": { "colors": property }, "required": ["colors"] }),
        );
        let html = render("t", "k", &r, "c").into_string();
        assert!(!html.contains("input-unsupported"), "{html}");
        for (i, label) in ["Red", "Green", "Blue"].iter().enumerate() {
            assert!(
                html.contains(&format!(r#"name="option.{i}.colors" value="true""#)),
                "{html}"
            );
            assert!(html.contains(&format!(" {label}</label>")), "{html}");
        }
        // The default ticks the first two.
        assert_eq!(html.matches("checked").count(), 2, "{html}");

        let post = |ticked: &[usize]| {
            let names: Vec<String> = ticked
                .iter()
                .map(|i| format!("option.{i}.colors"))
                .collect();
            answer_with(&r, |name| names.iter().any(|n| n == name).then_some("true"))
        };
        assert_eq!(
            post(&[0, 2]),
            Ok(json!({ "action": "accept", "content": { "colors": ["#FF0000", "#0000FF"] } }))
        );
        assert_eq!(
            post(&[]),
            Err("colors: choose at least 1 and at most 2".into())
        );
        assert!(post(&[0, 1, 2]).is_err());
    }
}
