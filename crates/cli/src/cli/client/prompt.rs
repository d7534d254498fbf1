//! Input requests asked in the terminal: each elicitation's `requestedSchema` becomes one
//! prompt per field (yes/no for booleans, a list for enums, text with validation for
//! strings and numbers, a checklist for arrays of enums), after the user has chosen to
//! answer, decline or cancel. The schema is read by the model the console reads it with
//! (`mcp_tasks_wire::requested_schema`): what one refuses, the other does, and says why.
//! Runs on a blocking thread: the prompts read the terminal.

use dialoguer::console::Term;
use dialoguer::{Confirm, Input, MultiSelect, Select};
use mcp_tasks_wire::requested_schema::{Field, Kind, RequestedSchema};
use serde_json::{Map, Value, json};

#[derive(Debug, thiserror::Error)]
pub(super) enum PromptError {
    /// Ctrl-C (or Esc) while a prompt was open.
    #[error("interrupted")]
    Interrupted,
    #[error("input is needed but there is no terminal to ask on")]
    NoTerminal,
    #[error("cannot answer a {0} request in the terminal")]
    Unsupported(String),
    #[error("the terminal failed: {0}")]
    Terminal(String),
}

impl From<dialoguer::Error> for PromptError {
    fn from(e: dialoguer::Error) -> Self {
        let dialoguer::Error::IO(e) = e;
        match e.kind() {
            std::io::ErrorKind::Interrupted => Self::Interrupted,
            std::io::ErrorKind::NotConnected => Self::NoTerminal,
            _ => Self::Terminal(e.to_string()),
        }
    }
}

/// The answers to a set of input requests, keyed as they were.
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub(super) responses: Map<String, Value>,
    /// Whether the user declined or dismissed any of them.
    pub(super) declined: bool,
}

/// Whether prompts can be shown at all.
pub(super) fn have_terminal() -> bool {
    Term::stderr().is_term()
}

/// Asks every request of `requests` (an `inputRequests` map) in key order.
pub(super) fn ask_all(requests: &Map<String, Value>) -> Result<Answers, PromptError> {
    if !have_terminal() {
        return Err(PromptError::NoTerminal);
    }
    let mut answers = Answers::default();
    for (key, request) in requests {
        let response = ask(request)?;
        let action = response.get("action").and_then(Value::as_str);
        answers.declined |= action != Some("accept");
        answers.responses.insert(key.clone(), response);
    }
    Ok(answers)
}

fn ask(request: &Value) -> Result<Value, PromptError> {
    let method = request.get("method").and_then(Value::as_str).unwrap_or("?");
    if method != "elicitation/create" {
        return Err(PromptError::Unsupported(method.to_owned()));
    }
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let text = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default();
    let term = Term::stderr();
    let say = |line: String| term.write_line(&line).map_err(io);
    say(format!("\nThe server asks: {}", text("message")))?;
    let url_mode = text("mode") == "url";
    // Read before the menu: a form the console would refuse is refused here too, with the
    // same reason, and can then only be declined or dismissed.
    let form = if url_mode {
        Ok(Vec::new())
    } else {
        RequestedSchema::parse(params.get("requestedSchema")).map(|s| s.fields)
    };
    let mut menu = Vec::new();
    match &form {
        _ if url_mode => {
            say(format!("Open this address to continue: {}", text("url")))?;
            menu.push(("Done (accept)", Reply::Accept));
        }
        Ok(_) => menu.push(("Answer", Reply::Accept)),
        Err(e) => say(format!("{e}; an MCP client can answer it."))?,
    }
    menu.push(("Decline", Reply::Decline));
    menu.push(("Cancel (dismiss)", Reply::Cancel));
    let labels: Vec<&str> = menu.iter().map(|(l, _)| *l).collect();
    let choice = Select::new()
        .with_prompt("How do you respond?")
        .items(&labels)
        .default(0)
        .interact_on_opt(&term)?
        .ok_or(PromptError::Interrupted)?;
    match (menu.get(choice).map(|(_, r)| r), form) {
        (Some(Reply::Accept), _) if url_mode => Ok(json!({ "action": "accept" })),
        (Some(Reply::Accept), Ok(fields)) => {
            Ok(json!({ "action": "accept", "content": ask_form(&term, &fields)? }))
        }
        (Some(Reply::Decline), _) => Ok(json!({ "action": "decline" })),
        _ => Ok(json!({ "action": "cancel" })),
    }
}

enum Reply {
    Accept,
    Decline,
    Cancel,
}

/// One prompt per field; optional fields left empty are left out.
fn ask_form(term: &Term, fields: &[Field]) -> Result<Value, PromptError> {
    let mut content = Map::new();
    for field in fields {
        if let Some(value) = ask_field(term, field)? {
            content.insert(field.name.clone(), value);
        }
    }
    Ok(Value::Object(content))
}

fn ask_field(term: &Term, field: &Field) -> Result<Option<Value>, PromptError> {
    let mut label = match &field.description {
        Some(d) => format!("{} ({d})", field.label()),
        None => field.label().to_owned(),
    };
    if !field.required {
        label.push_str(" [optional]");
    }
    match &field.kind {
        Kind::Boolean { default } => {
            let mut prompt = Confirm::new().with_prompt(label);
            if let Some(default) = default {
                prompt = prompt.default(*default);
            }
            let answer = prompt
                .interact_on_opt(term)?
                .ok_or(PromptError::Interrupted)?;
            Ok(Some(Value::Bool(answer)))
        }
        Kind::Select { choices, default } => {
            let mut items: Vec<&str> = choices.iter().map(|c| c.label.as_str()).collect();
            if !field.required {
                items.push("(leave empty)");
            }
            let at = default
                .as_ref()
                .and_then(|d| choices.iter().position(|c| &c.value == d))
                .unwrap_or(0);
            let choice = Select::new()
                .with_prompt(label)
                .items(&items)
                .default(at)
                .interact_on_opt(term)?
                .ok_or(PromptError::Interrupted)?;
            Ok(choices.get(choice).map(|c| Value::String(c.value.clone())))
        }
        Kind::MultiSelect { .. } => ask_multi(term, &label, field),
        Kind::Number { default, .. } => ask_text(
            term,
            &label,
            field,
            default.as_ref().map(ToString::to_string),
        ),
        Kind::Text { default, .. } => ask_text(term, &label, field, default.clone()),
    }
}

/// The checklist of a multi-select: its labels, and which are ticked at first.
fn checklist(field: &Field) -> (Vec<&str>, Vec<bool>) {
    let Kind::MultiSelect {
        choices, default, ..
    } = &field.kind
    else {
        return (Vec::new(), Vec::new());
    };
    choices
        .iter()
        .map(|c| (c.label.as_str(), default.contains(&c.value)))
        .unzip()
}

/// The answer of a multi-select given the indices ticked: none on an optional field is no
/// answer (as an empty text is; the console does the same).
fn chosen(field: &Field, ticked: &[usize]) -> Result<Option<Value>, String> {
    if ticked.is_empty() && !field.required {
        return Ok(None);
    }
    field.read_choices(ticked).map(Some)
}

fn ask_multi(term: &Term, label: &str, field: &Field) -> Result<Option<Value>, PromptError> {
    let (labels, ticked) = checklist(field);
    loop {
        let picked = MultiSelect::new()
            .with_prompt(format!("{label} (space to choose, enter to confirm)"))
            .items(&labels)
            .defaults(&ticked)
            .interact_on_opt(term)?
            .ok_or(PromptError::Interrupted)?;
        match chosen(field, &picked) {
            Ok(answer) => return Ok(answer),
            Err(why) => term.write_line(&sentence(&why)).map_err(io)?,
        }
    }
}

/// `why` as a line of its own: capitalised, with a full stop.
fn sentence(why: &str) -> String {
    let mut chars = why.chars();
    let first = chars.next().map(|c| c.to_uppercase().to_string());
    format!("{}{}.", first.unwrap_or_default(), chars.as_str())
}

/// A text or number field, checked as it is typed by the shared model.
fn ask_text(
    term: &Term,
    label: &str,
    field: &Field,
    default: Option<String>,
) -> Result<Option<Value>, PromptError> {
    let required = field.required;
    let check = field.clone();
    let mut prompt = Input::<String>::new()
        .with_prompt(label)
        .allow_empty(!required)
        .validate_with(move |s: &String| -> Result<(), String> {
            if s.is_empty() && !required {
                return Ok(());
            }
            if s.is_empty() {
                return Err("an answer is required".into());
            }
            check.read_text(s).map(drop)
        });
    if let Some(default) = default {
        prompt = prompt.default(default);
    }
    let text = prompt.interact_text_on(term)?;
    if text.is_empty() {
        return Ok(None);
    }
    field
        .read_text(&text)
        .map(Some)
        .map_err(PromptError::Terminal)
}

fn io(e: std::io::Error) -> PromptError {
    PromptError::Terminal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The official multi-select example, which the console's form tests read too: both
    /// offer its three labelled choices and answer with the chosen values.
    const MULTI_SELECT: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wire/tests/official/examples/TitledMultiSelectEnumSchema/titled-color-multi-select-schema.json"
    ));

    fn colors() -> Field {
        let property: Value = serde_json::from_str(MULTI_SELECT).expect("the example");
        let schema = json!({ "type": "object", "properties": { "colors": property }, "required": ["colors"] });
        RequestedSchema::parse(Some(&schema))
            .expect("a multi-select is asked")
            .fields
            .remove(0)
    }

    #[test]
    fn a_multi_select_is_a_checklist_answered_with_the_values_ticked() {
        let field = colors();
        assert_eq!(
            checklist(&field),
            (vec!["Red", "Green", "Blue"], vec![true, true, false])
        );
        assert_eq!(
            chosen(&field, &[0, 2]),
            Ok(Some(json!(["#FF0000", "#0000FF"])))
        );
        assert_eq!(
            chosen(&field, &[]),
            Err("choose at least 1 and at most 2".into())
        );
        assert!(chosen(&field, &[0, 1, 2]).is_err());
    }

    #[test]
    fn a_schema_the_console_refuses_is_refused_with_the_same_reason() {
        let schema = json!({ "properties": { "a": { "type": "array" } } });
        let e = RequestedSchema::parse(Some(&schema)).expect_err("refused");
        assert!(
            e.to_string()
                .ends_with("property \"a\": an array without an \"items\" object"),
            "{e}"
        );
    }
}
