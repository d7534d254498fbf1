//! An elicitation's `requestedSchema` as typed form fields, read alike by every place that
//! asks a person (the server's console, the CLI's prompts), so they accept and refuse the
//! same schemas with the same words.
//!
//! MCP restricts the schema to a flat object of primitive properties
//! (`PrimitiveSchemaDefinition`): strings (lengths, `format`), numbers and integers
//! (bounds), booleans, single-select enums (`enum`, legacy `enumNames`, `oneOf` of
//! `const`/`title`) and multi-select enums (`type: "array"` with `items.enum` or
//! `items.anyOf`), each with an optional title, description and default. Anything else is
//! an [`Unsupported`] that says which property and why. A default of the wrong type is
//! ignored rather than refused: it only pre-fills the form.
//!
//! The answer itself is checked by the JSON Schema validator `tasks/update` uses; the
//! checks here ([`Field::read_text`], [`Field::read_choices`]) are the early, friendlier
//! ones a person sees while filling the form in.

use serde_json::{Map, Number, Value};

/// The fields of a `requestedSchema`, in the order of its `properties`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedSchema {
    pub fields: Vec<Field>,
}

/// One property of the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub required: bool,
    pub kind: Kind,
}

/// What a field asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Text {
        format: Option<Format>,
        min_length: Option<u64>,
        max_length: Option<u64>,
        default: Option<String>,
    },
    Number {
        integer: bool,
        minimum: Option<f64>,
        maximum: Option<f64>,
        default: Option<Number>,
    },
    Boolean {
        default: Option<bool>,
    },
    /// One of the choices.
    Select {
        choices: Vec<Choice>,
        default: Option<String>,
    },
    /// Any number of the choices, within `min_items..=max_items`.
    MultiSelect {
        choices: Vec<Choice>,
        min_items: Option<u64>,
        max_items: Option<u64>,
        default: Vec<String>,
    },
}

/// An enum value and the label shown for it (the value itself when the schema has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub value: String,
    pub label: String,
}

/// The string formats the schema allows; other formats are not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Email,
    Uri,
    Date,
    DateTime,
}

/// A schema a form cannot express, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the requested schema cannot be asked as a form: {}",
            self.0
        )
    }
}

impl std::error::Error for Unsupported {}

impl RequestedSchema {
    /// Reads `schema` (an elicitation's `requestedSchema`). A missing schema (`None`) asks
    /// for nothing.
    pub fn parse(schema: Option<&Value>) -> Result<Self, Unsupported> {
        let Some(schema) = schema else {
            return Ok(Self { fields: Vec::new() });
        };
        let schema = schema
            .as_object()
            .ok_or_else(|| unsupported("it is not an object"))?;
        match schema.get("type") {
            None => {}
            Some(Value::String(t)) if t == "object" => {}
            Some(other) => return Err(unsupported(format!("its type is {other}, not \"object\""))),
        }
        let required: Vec<&str> = match schema.get("required") {
            None => Vec::new(),
            Some(Value::Array(names)) => names
                .iter()
                .map(|n| {
                    n.as_str()
                        .ok_or_else(|| unsupported("\"required\" names a non-string"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(unsupported("\"required\" is not an array")),
        };
        let properties = match schema.get("properties") {
            None => return Ok(Self { fields: Vec::new() }),
            Some(Value::Object(p)) => p,
            Some(_) => return Err(unsupported("\"properties\" is not an object")),
        };
        let fields = properties
            .iter()
            .map(|(name, property)| {
                let property = property
                    .as_object()
                    .ok_or_else(|| unsupported(format!("property {name:?} is not an object")))?;
                let kind = kind(property)
                    .map_err(|why| unsupported(format!("property {name:?}: {why}")))?;
                let text = |k: &str| property.get(k).and_then(Value::as_str).map(str::to_owned);
                Ok(Field {
                    name: name.clone(),
                    title: text("title"),
                    description: text("description"),
                    required: required.contains(&name.as_str()),
                    kind,
                })
            })
            .collect::<Result<_, Unsupported>>()?;
        Ok(Self { fields })
    }
}

fn unsupported(why: impl Into<String>) -> Unsupported {
    Unsupported(why.into())
}

fn kind(property: &Map<String, Value>) -> Result<Kind, String> {
    let ty = match property.get("type") {
        None => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(other) => return Err(format!("its type {other} is not a string")),
    };
    let single = choices(property, "oneOf")
        .transpose()
        .or_else(|| choices(property, "anyOf").transpose())
        .transpose()?;
    match ty {
        Some("string") | None if single.is_some() => Ok(Kind::Select {
            choices: single.unwrap_or_default(),
            default: text(property, "default"),
        }),
        Some("string") => Ok(Kind::Text {
            format: match property.get("format").and_then(Value::as_str) {
                Some("email") => Some(Format::Email),
                Some("uri") => Some(Format::Uri),
                Some("date") => Some(Format::Date),
                Some("date-time") => Some(Format::DateTime),
                _ => None,
            },
            min_length: property.get("minLength").and_then(Value::as_u64),
            max_length: property.get("maxLength").and_then(Value::as_u64),
            default: text(property, "default"),
        }),
        Some(t @ ("number" | "integer")) => Ok(Kind::Number {
            integer: t == "integer",
            minimum: property.get("minimum").and_then(Value::as_f64),
            maximum: property.get("maximum").and_then(Value::as_f64),
            default: match property.get("default") {
                Some(Value::Number(n)) if t == "number" || n.is_i64() || n.is_u64() => {
                    Some(n.clone())
                }
                _ => None,
            },
        }),
        Some("boolean") => Ok(Kind::Boolean {
            default: property.get("default").and_then(Value::as_bool),
        }),
        Some("array") => {
            let items = property
                .get("items")
                .and_then(Value::as_object)
                .ok_or("an array without an \"items\" object")?;
            if items
                .get("type")
                .is_some_and(|t| t.as_str() != Some("string"))
            {
                return Err("an array whose items are not strings".into());
            }
            let choices = choices(items, "anyOf")
                .transpose()
                .or_else(|| choices(items, "oneOf").transpose())
                .transpose()?
                .ok_or("an array whose items are not an enum")?;
            let default = match property.get("default") {
                Some(Value::Array(d)) if d.iter().all(Value::is_string) => d
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            };
            Ok(Kind::MultiSelect {
                choices,
                min_items: property.get("minItems").and_then(Value::as_u64),
                max_items: property.get("maxItems").and_then(Value::as_u64),
                default,
            })
        }
        Some(other) => Err(format!("type {other:?} is not one a form can ask for")),
        None => Err("no type".into()),
    }
}

fn text(property: &Map<String, Value>, key: &str) -> Option<String> {
    property.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The choices of `property`: `enum` (labelled by `enumNames`), or else `options` (the
/// key `oneOf` or `anyOf`) of `const` with `title`. `Ok(None)`: neither is there.
fn choices(property: &Map<String, Value>, options: &str) -> Result<Option<Vec<Choice>>, String> {
    let choices: Vec<Choice> = if let Some(values) = property.get("enum") {
        let values = values.as_array().ok_or("\"enum\" is not an array")?;
        let names = property.get("enumNames").and_then(Value::as_array);
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let value = v.as_str().ok_or("an enum value that is not a string")?;
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .unwrap_or(value);
                Ok(Choice {
                    value: value.to_owned(),
                    label: label.to_owned(),
                })
            })
            .collect::<Result<_, String>>()?
    } else if let Some(list) = property.get(options) {
        let list = list
            .as_array()
            .ok_or_else(|| format!("{options:?} is not an array"))?;
        list.iter()
            .map(|o| {
                let value = o.get("const").and_then(Value::as_str).ok_or_else(|| {
                    format!("an option of {options:?} without a string \"const\"")
                })?;
                let label = o.get("title").and_then(Value::as_str).unwrap_or(value);
                Ok(Choice {
                    value: value.to_owned(),
                    label: label.to_owned(),
                })
            })
            .collect::<Result<_, String>>()?
    } else {
        return Ok(None);
    };
    if choices.is_empty() {
        return Err("an enum without any value".into());
    }
    Ok(Some(choices))
}

impl Field {
    /// What to call the field: its title, else its name.
    pub fn label(&self) -> &str {
        self.title.as_deref().unwrap_or(&self.name)
    }

    /// The answer typed as `text` for a text, number or single-select field, or why it
    /// is not acceptable. Empty text is not an answer: the caller leaves the field out
    /// (or insists, when it is required).
    pub fn read_text(&self, text: &str) -> Result<Value, String> {
        let text = text.trim();
        match &self.kind {
            Kind::Text {
                format,
                min_length,
                max_length,
                ..
            } => {
                let len = text.chars().count() as u64;
                if let Some(min) = min_length
                    && len < *min
                {
                    return Err(format!("at least {min} characters"));
                }
                if let Some(max) = max_length
                    && len > *max
                {
                    return Err(format!("at most {max} characters"));
                }
                if let Some(format) = format
                    && !format.fits(text)
                {
                    return Err(format!("not a valid {}", format.name()));
                }
                Ok(Value::String(text.to_owned()))
            }
            Kind::Number {
                integer,
                minimum,
                maximum,
                ..
            } => {
                let (value, n) = if *integer {
                    let i: i64 = text
                        .parse()
                        .map_err(|_| "a whole number is required".to_owned())?;
                    (i as f64, Number::from(i))
                } else {
                    text.parse::<f64>()
                        .ok()
                        .and_then(|f| Number::from_f64(f).map(|n| (f, n)))
                        .ok_or_else(|| "a number is required".to_owned())?
                };
                if let Some(min) = minimum
                    && value < *min
                {
                    return Err(format!("at least {min}"));
                }
                if let Some(max) = maximum
                    && value > *max
                {
                    return Err(format!("at most {max}"));
                }
                Ok(Value::Number(n))
            }
            Kind::Select { choices, .. } => choices
                .iter()
                .find(|c| c.value == text)
                .map(|c| Value::String(c.value.clone()))
                .ok_or_else(|| format!("{text:?} is not one of the choices")),
            Kind::Boolean { .. } => match text {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(format!("{text:?} is neither true nor false")),
            },
            Kind::MultiSelect { .. } => Err("choose from the list".into()),
        }
    }

    /// The answer of a multi-select field given the indices of the chosen choices, or
    /// why it is not acceptable (how many were chosen).
    pub fn read_choices(&self, chosen: &[usize]) -> Result<Value, String> {
        let Kind::MultiSelect {
            choices,
            min_items,
            max_items,
            ..
        } = &self.kind
        else {
            return Err("not a multi-select field".into());
        };
        let n = chosen.len() as u64;
        let min = min_items.unwrap_or(0);
        if n < min || max_items.is_some_and(|max| n > max) {
            return Err(match max_items {
                Some(max) => format!("choose at least {min} and at most {max}"),
                None => format!("choose at least {min}"),
            });
        }
        chosen
            .iter()
            .map(|&i| {
                choices
                    .get(i)
                    .map(|c| Value::String(c.value.clone()))
                    .ok_or_else(|| format!("there is no choice {i}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    }
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Uri => "uri",
            Self::Date => "date",
            Self::DateTime => "date-time",
        }
    }

    /// A plausibility check, not a full grammar: the validator has the last word.
    fn fits(self, text: &str) -> bool {
        use time::format_description::well_known::{Iso8601, Rfc3339};
        match self {
            Self::Email => text
                .split_once('@')
                .is_some_and(|(a, b)| !a.is_empty() && b.contains('.') && !text.contains(' ')),
            Self::Uri => text
                .split_once("://")
                .is_some_and(|(s, rest)| !s.is_empty() && !rest.is_empty()),
            Self::Date => time::Date::parse(text, &Iso8601::DATE).is_ok(),
            Self::DateTime => time::OffsetDateTime::parse(text, &Rfc3339).is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(property: Value) -> Result<Field, Unsupported> {
        let schema =
            json!({ "type": "object", "properties": { "f": property }, "required": ["f"] });
        RequestedSchema::parse(Some(&schema)).map(|mut s| s.fields.remove(0))
    }

    fn choice(value: &str, label: &str) -> Choice {
        Choice {
            value: value.into(),
            label: label.into(),
        }
    }

    #[test]
    fn answers_typed_in_are_checked_against_the_field() {
        let age = one(json!({ "type": "integer", "minimum": 0, "maximum": 130 })).unwrap();
        assert_eq!(age.read_text("42"), Ok(json!(42)));
        assert!(age.read_text("4.5").is_err());
        assert!(age.read_text("-1").is_err());
        assert!(age.read_text("131").is_err());
        let ratio = one(json!({ "type": "number", "maximum": 1 })).unwrap();
        assert_eq!(ratio.read_text("0.5"), Ok(json!(0.5)));
        assert!(ratio.read_text("NaN").is_err());

        let name = one(json!({ "type": "string", "minLength": 2, "maxLength": 4 })).unwrap();
        assert!(name.read_text("a").is_err());
        assert_eq!(name.read_text("abcd"), Ok(json!("abcd")));
        assert!(name.read_text("abcde").is_err());
        let email = one(json!({ "type": "string", "format": "email" })).unwrap();
        assert!(email.read_text("a@b.org").is_ok());
        assert!(email.read_text("ab.org").is_err());
        let date = one(json!({ "type": "string", "format": "date" })).unwrap();
        assert!(date.read_text("2026-07-28").is_ok());
        assert!(date.read_text("28/07/2026").is_err());
        let uri = one(json!({ "type": "string", "format": "uri" })).unwrap();
        assert!(uri.read_text("https://example.com/x").is_ok());
        assert!(uri.read_text("example.com").is_err());
    }

    #[test]
    fn enums_take_their_labels_from_the_schema() {
        let legacy =
            one(json!({ "type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"] }))
                .unwrap();
        assert_eq!(
            legacy.kind,
            Kind::Select {
                choices: vec![choice("s", "Small"), choice("l", "Large")],
                default: None
            }
        );
        let titled = one(
            json!({ "type": "string", "oneOf": [{ "const": "a", "title": "Apple" }, { "const": "b" }] }),
        )
        .unwrap();
        assert_eq!(
            titled.kind,
            Kind::Select {
                choices: vec![choice("a", "Apple"), choice("b", "b")],
                default: None
            }
        );
        assert_eq!(titled.read_text("a"), Ok(json!("a")));
        assert!(titled.read_text("Apple").is_err());
    }

    #[test]
    fn multi_selects_count_their_choices() {
        let f = one(json!({
            "type": "array", "minItems": 1, "maxItems": 2,
            "items": { "type": "string", "enum": ["r", "g", "b"] }
        }))
        .unwrap();
        assert_eq!(f.read_choices(&[0, 2]), Ok(json!(["r", "b"])));
        assert_eq!(
            f.read_choices(&[]),
            Err("choose at least 1 and at most 2".into())
        );
        assert!(f.read_choices(&[0, 1, 2]).is_err());
        assert!(f.read_choices(&[3]).is_err());
    }

    #[test]
    fn what_a_form_cannot_express_is_refused_with_the_reason() {
        for (schema, why) in [
            (json!("x"), "it is not an object"),
            (
                json!({ "type": "array" }),
                "its type is \"array\", not \"object\"",
            ),
            (
                json!({ "properties": 3 }),
                "\"properties\" is not an object",
            ),
            (json!({ "required": "a" }), "\"required\" is not an array"),
            (
                json!({ "properties": { "a": { "type": "array" } } }),
                "property \"a\": an array without an \"items\" object",
            ),
            (
                json!({ "properties": { "a": { "type": "array", "items": { "type": "string" } } } }),
                "property \"a\": an array whose items are not an enum",
            ),
            (
                json!({ "properties": { "a": { "type": "object" } } }),
                "property \"a\": type \"object\" is not one a form can ask for",
            ),
            (
                json!({ "properties": { "a": { "type": "string", "enum": [1, 2] } } }),
                "property \"a\": an enum value that is not a string",
            ),
        ] {
            assert_eq!(
                RequestedSchema::parse(Some(&schema)),
                Err(Unsupported(why.into())),
                "{schema}"
            );
        }
        assert_eq!(
            RequestedSchema::parse(None),
            Ok(RequestedSchema { fields: Vec::new() })
        );
    }
}
