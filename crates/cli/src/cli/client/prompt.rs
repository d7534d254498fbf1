//! Input requests asked in the terminal: each elicitation's `requestedSchema` becomes one
//! prompt per field (yes/no for booleans, a list for enums, text with validation for
//! strings and numbers, a checklist for arrays of enums), after the user has chosen to
//! answer, decline or cancel. Runs on a blocking thread: the prompts read the terminal.

use dialoguer::console::Term;
use dialoguer::{Confirm, Input, MultiSelect, Select};
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
    if url_mode {
        say(format!("Open this address to continue: {}", text("url")))?;
    }
    let choices = if url_mode {
        ["Done (accept)", "Decline", "Cancel (dismiss)"]
    } else {
        ["Answer", "Decline", "Cancel (dismiss)"]
    };
    let choice = Select::new()
        .with_prompt("How do you respond?")
        .items(choices)
        .default(0)
        .interact_on_opt(&term)?
        .ok_or(PromptError::Interrupted)?;
    match choice {
        0 if url_mode => Ok(json!({ "action": "accept" })),
        0 => {
            let schema = params
                .get("requestedSchema")
                .cloned()
                .unwrap_or(Value::Null);
            Ok(json!({ "action": "accept", "content": ask_form(&term, &schema)? }))
        }
        1 => Ok(json!({ "action": "decline" })),
        _ => Ok(json!({ "action": "cancel" })),
    }
}

/// One prompt per property of a flat object schema; optional fields left empty are
/// left out.
fn ask_form(term: &Term, schema: &Value) -> Result<Value, PromptError> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut content = Map::new();
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, field) in properties {
        if let Some(value) = ask_field(term, name, field, required.contains(&name.as_str()))? {
            content.insert(name.clone(), value);
        }
    }
    Ok(Value::Object(content))
}

fn ask_field(
    term: &Term,
    name: &str,
    field: &Value,
    required: bool,
) -> Result<Option<Value>, PromptError> {
    let title = field.get("title").and_then(Value::as_str).unwrap_or(name);
    let mut label = match field.get("description").and_then(Value::as_str) {
        Some(d) => format!("{title} ({d})"),
        None => title.to_owned(),
    };
    if !required {
        label.push_str(" [optional]");
    }
    if let Some(options) = enum_options(field) {
        return ask_enum(term, &label, &options, field.get("default"), required);
    }
    match field.get("type").and_then(Value::as_str) {
        Some("boolean") => {
            let mut prompt = Confirm::new().with_prompt(label);
            if let Some(default) = field.get("default").and_then(Value::as_bool) {
                prompt = prompt.default(default);
            }
            let answer = prompt
                .interact_on_opt(term)?
                .ok_or(PromptError::Interrupted)?;
            Ok(Some(Value::Bool(answer)))
        }
        Some("array") => ask_multi(term, &label, field),
        Some(kind @ ("number" | "integer")) => {
            let integer = kind == "integer";
            let owned = field.clone();
            let text = ask_text(term, &label, field, required, move |s| {
                number_error(s, &owned, integer)
            })?;
            Ok(text.map(|t| parse_number(&t, integer)))
        }
        _ => {
            let owned = field.clone();
            let text = ask_text(term, &label, field, required, move |s| {
                string_error(s, &owned)
            })?;
            Ok(text.map(Value::String))
        }
    }
}

/// `(value, label)` pairs of an enum field: `enum` (with `enumNames`), or `oneOf` /
/// `anyOf` of `const` with `title`.
fn enum_options(field: &Value) -> Option<Vec<(Value, String)>> {
    if let Some(values) = field.get("enum").and_then(Value::as_array) {
        let names = field.get("enumNames").and_then(Value::as_array);
        return Some(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let label = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map_or_else(|| plain(v), str::to_owned);
                    (v.clone(), label)
                })
                .collect(),
        );
    }
    let one_of = field
        .get("oneOf")
        .or_else(|| field.get("anyOf"))?
        .as_array()?;
    let options: Vec<(Value, String)> = one_of
        .iter()
        .filter_map(|o| {
            let value = o.get("const")?.clone();
            let label = o
                .get("title")
                .and_then(Value::as_str)
                .map_or_else(|| plain(&value), str::to_owned);
            Some((value, label))
        })
        .collect();
    (!options.is_empty()).then_some(options)
}

fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn ask_enum(
    term: &Term,
    label: &str,
    options: &[(Value, String)],
    default: Option<&Value>,
    required: bool,
) -> Result<Option<Value>, PromptError> {
    let mut items: Vec<String> = options.iter().map(|(_, l)| l.clone()).collect();
    if !required {
        items.push("(leave empty)".into());
    }
    let at = default
        .and_then(|d| options.iter().position(|(v, _)| v == d))
        .unwrap_or(0);
    let choice = Select::new()
        .with_prompt(label)
        .items(&items)
        .default(at)
        .interact_on_opt(term)?
        .ok_or(PromptError::Interrupted)?;
    Ok(options.get(choice).map(|(v, _)| v.clone()))
}

fn ask_multi(term: &Term, label: &str, field: &Value) -> Result<Option<Value>, PromptError> {
    let Some(options) = field.get("items").and_then(enum_options) else {
        return Err(PromptError::Unsupported(format!(
            "array field {label:?} whose items are not an enum, as a"
        )));
    };
    let min = field.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = field.get("maxItems").and_then(Value::as_u64);
    let labels: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
    loop {
        let chosen = MultiSelect::new()
            .with_prompt(format!("{label} (space to choose, enter to confirm)"))
            .items(&labels)
            .interact_on_opt(term)?
            .ok_or(PromptError::Interrupted)?;
        let too_many = max.is_some_and(|m| chosen.len() as u64 > m);
        if chosen.len() >= min && !too_many {
            return Ok(Some(Value::Array(
                chosen.iter().map(|&i| options[i].0.clone()).collect(),
            )));
        }
        term.write_line(&format!(
            "Choose at least {min}{}.",
            max.map(|m| format!(" and at most {m}")).unwrap_or_default()
        ))
        .map_err(io)?;
    }
}

fn ask_text(
    term: &Term,
    label: &str,
    field: &Value,
    required: bool,
    mut check: impl FnMut(&str) -> Option<String> + 'static,
) -> Result<Option<String>, PromptError> {
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
            check(s).map_or(Ok(()), Err)
        });
    if let Some(default) = field.get("default") {
        prompt = prompt.default(plain(default));
    }
    let text = prompt.interact_text_on(term)?;
    Ok((!text.is_empty()).then_some(text))
}

fn parse_number(text: &str, integer: bool) -> Value {
    let text = text.trim();
    if integer && let Ok(i) = text.parse::<i64>() {
        return json!(i);
    }
    text.parse::<f64>().map_or(Value::Null, |f| json!(f))
}

/// Why `text` is not an acceptable number for `field`, if it is not.
fn number_error(text: &str, field: &Value, integer: bool) -> Option<String> {
    let text = text.trim();
    let value = if integer {
        match text.parse::<i64>() {
            Ok(i) => i as f64,
            Err(_) => return Some("a whole number is required".into()),
        }
    } else {
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => f,
            _ => return Some("a number is required".into()),
        }
    };
    if let Some(min) = field.get("minimum").and_then(Value::as_f64)
        && value < min
    {
        return Some(format!("at least {min}"));
    }
    if let Some(max) = field.get("maximum").and_then(Value::as_f64)
        && value > max
    {
        return Some(format!("at most {max}"));
    }
    None
}

/// Why `text` is not an acceptable string for `field` (lengths, `format`), if it is not.
fn string_error(text: &str, field: &Value) -> Option<String> {
    let len = text.chars().count() as u64;
    if let Some(min) = field.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        return Some(format!("at least {min} characters"));
    }
    if let Some(max) = field.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        return Some(format!("at most {max} characters"));
    }
    let format = field.get("format").and_then(Value::as_str);
    let bad = match format {
        Some("email") => text
            .split_once('@')
            .is_none_or(|(a, b)| a.is_empty() || !b.contains('.') || text.contains(' ')),
        Some("uri") => text
            .split_once("://")
            .is_none_or(|(s, rest)| s.is_empty() || rest.is_empty()),
        Some("date") => {
            time::Date::parse(text, &time::format_description::well_known::Iso8601::DATE).is_err()
        }
        Some("date-time") => {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .is_err()
        }
        _ => false,
    };
    bad.then(|| format!("not a valid {}", format.unwrap_or("value")))
}

fn io(e: std::io::Error) -> PromptError {
    PromptError::Terminal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_against_the_field() {
        let age = json!({ "type": "integer", "minimum": 0, "maximum": 130 });
        assert_eq!(number_error("42", &age, true), None);
        assert!(number_error("4.5", &age, true).is_some());
        assert!(number_error("-1", &age, true).is_some());
        assert!(number_error("131", &age, true).is_some());
        assert_eq!(parse_number("42", true), json!(42));
        let ratio = json!({ "type": "number", "maximum": 1 });
        assert_eq!(number_error("0.5", &ratio, false), None);
        assert!(number_error("NaN", &ratio, false).is_some());
        assert_eq!(parse_number("0.5", false), json!(0.5));

        let name = json!({ "type": "string", "minLength": 2, "maxLength": 4 });
        assert!(string_error("a", &name).is_some());
        assert_eq!(string_error("abcd", &name), None);
        assert!(string_error("abcde", &name).is_some());
        let email = json!({ "type": "string", "format": "email" });
        assert_eq!(string_error("a@b.org", &email), None);
        assert!(string_error("ab.org", &email).is_some());
        let date = json!({ "type": "string", "format": "date" });
        assert_eq!(string_error("2026-07-28", &date), None);
        assert!(string_error("28/07/2026", &date).is_some());
        let uri = json!({ "type": "string", "format": "uri" });
        assert_eq!(string_error("https://example.com/x", &uri), None);
        assert!(string_error("example.com", &uri).is_some());
    }

    #[test]
    fn enums_take_their_labels_from_the_schema() {
        let legacy =
            json!({ "type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"] });
        assert_eq!(
            enum_options(&legacy),
            Some(vec![
                (json!("s"), "Small".into()),
                (json!("l"), "Large".into())
            ])
        );
        let titled = json!({ "type": "string", "oneOf": [{ "const": "a", "title": "Apple" }, { "const": "b" }] });
        assert_eq!(
            enum_options(&titled),
            Some(vec![(json!("a"), "Apple".into()), (json!("b"), "b".into())])
        );
        assert_eq!(enum_options(&json!({ "type": "string" })), None);
    }
}
