//! SEP-2243 custom headers: tool parameters annotated with `x-mcp-header` are mirrored
//! into `Mcp-Param-{Name}` headers. Clients and servers read the annotations alike
//! ([`header_params`]); a server checks the headers of a call against its arguments
//! ([`check_param_headers`]).

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::ErrorObject;
use crate::headers::decode_value;

pub const KEY: &str = "x-mcp-header";
/// Integers beyond this are not exact in JavaScript, so they cannot be mirrored.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// One annotated property: its path of `properties` keys and the header name part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    pub path: Vec<String>,
    pub name: String,
}

/// The annotated parameters of an `inputSchema`, or why the tool must be rejected.
pub fn header_params(schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), true, &mut found)?;
    let mut seen = HashSet::new();
    for p in &found {
        if !seen.insert(p.name.to_ascii_lowercase()) {
            return Err(format!(
                "x-mcp-header {:?} is used twice (names are case-insensitive)",
                p.name
            ));
        }
    }
    Ok(found)
}

/// `reachable`: only a chain of `properties` keys from the root may carry annotations.
fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    found: &mut Vec<HeaderParam>,
) -> Result<(), String> {
    match schema {
        Value::Object(map) => {
            if let Some(name) = map.get(KEY) {
                if !reachable || path.is_empty() {
                    return Err(format!(
                        "x-mcp-header at {} is not on a property reachable through `properties` alone",
                        pointer(path)
                    ));
                }
                let name = name
                    .as_str()
                    .ok_or_else(|| format!("x-mcp-header at {} is not a string", pointer(path)))?;
                check_name(name).map_err(|e| format!("x-mcp-header at {}: {e}", pointer(path)))?;
                let ty = map.get("type").and_then(Value::as_str);
                if !matches!(ty, Some("string" | "integer" | "boolean")) {
                    return Err(format!(
                        "x-mcp-header at {} is on a property of type {}; only string, integer and boolean may be mirrored",
                        pointer(path),
                        ty.map_or("(none)".to_owned(), |t| format!("{t:?}"))
                    ));
                }
                found.push(HeaderParam {
                    path: path.clone(),
                    name: name.to_owned(),
                });
            }
            for (key, child) in map {
                if key == "properties"
                    && let Value::Object(props) = child
                {
                    for (prop, sub) in props {
                        path.push(prop.clone());
                        walk(sub, path, reachable, found)?;
                        path.pop();
                    }
                } else if key != KEY {
                    // Anything else (`items`, `oneOf`, `$defs`, `if`…) leaves the static chain.
                    path.push(format!("({key})"));
                    walk(child, path, false, found)?;
                    path.pop();
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for item in items {
                walk(item, path, false, found)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// RFC 9110 `token`: `1*tchar`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    match name.chars().find(|&c| !tchar(c)) {
        Some(c) => Err(format!(
            "{name:?} has {c:?}, which is not allowed in a header name"
        )),
        None => Ok(()),
    }
}

fn pointer(path: &[String]) -> String {
    if path.is_empty() {
        "the schema root".into()
    } else {
        format!("/{}", path.join("/"))
    }
}

/// The argument at a parameter's path, if any (`null` counts as none).
pub fn argument_at<'a>(
    param: &HeaderParam,
    arguments: &'a Map<String, Value>,
) -> Option<&'a Value> {
    let (last, parents) = param.path.split_last()?;
    let mut level = arguments;
    for key in parents {
        level = level.get(key)?.as_object()?;
    }
    level.get(last).filter(|v| !v.is_null())
}

/// Checks the `Mcp-Param-*` headers of a `tools/call` against its arguments, as a server
/// that reads the body must: a value in the body needs its header, a header needs its
/// value, and the header (decoded from `=?base64?…?=`, whose encoding must be valid)
/// must equal the value (integers compared as numbers). `header` returns a header's raw
/// value by its lowercase name. Any failure is `-32020`.
pub fn check_param_headers<'h>(
    params: &[HeaderParam],
    arguments: &Map<String, Value>,
    header: impl Fn(&str) -> Option<&'h [u8]>,
) -> Result<(), ErrorObject> {
    for param in params {
        let name = format!("Mcp-Param-{}", param.name);
        let raw = header(&name.to_ascii_lowercase());
        let value = argument_at(param, arguments);
        let (raw, value) = match (raw, value) {
            (None, None) => continue,
            (None, Some(_)) => {
                return Err(ErrorObject::header_mismatch(format!(
                    "the {name} header is required: the arguments carry {}",
                    param.path.join(".")
                )));
            }
            (Some(_), None) => {
                return Err(ErrorObject::header_mismatch(format!(
                    "the {name} header is present but the arguments carry no {}",
                    param.path.join(".")
                )));
            }
            (Some(raw), Some(value)) => (raw, value),
        };
        let text = decode_value(raw)
            .map_err(|e| ErrorObject::header_mismatch(format!("invalid {name} header: {e}")))?;
        let matches = match value {
            Value::String(s) => *s == text,
            Value::Bool(b) => text == b.to_string(),
            Value::Number(n) => match (n.as_f64(), text.trim().parse::<f64>()) {
                (Some(body), Ok(head)) => body == head,
                _ => false,
            },
            _ => false,
        };
        if !matches {
            return Err(ErrorObject::header_mismatch(format!(
                "{name} header value does not match the body value of {}",
                param.path.join(".")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotations_must_be_statically_reachable_primitives() {
        let ok = json!({"type":"object","properties":{
            "a":{"type":"string","x-mcp-header":"A"},
            "o":{"type":"object","properties":{"b":{"type":"integer","x-mcp-header":"B"}}}}});
        assert_eq!(header_params(&ok).expect("valid").len(), 2);
        for bad in [
            json!({"type":"object","properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"L"}}}}),
            json!({"type":"object","oneOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}),
            json!({"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}),
            json!({"type":"object","properties":{"n":{"type":"string","x-mcp-header":"Région"}}}),
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}}),
        ] {
            assert!(header_params(&bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn server_checks_headers_against_the_body() {
        let schema = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "n":{"type":"integer","x-mcp-header":"N"},
            "o":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}}}});
        let params = header_params(&schema).expect("valid");
        let args = |v: Value| v.as_object().cloned().expect("object");
        let check = |a: &Map<String, Value>, h: &[(&'static str, &'static str)]| {
            let h = h.to_vec();
            check_param_headers(&params, a, move |name| {
                h.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.as_bytes())
            })
        };
        let full = args(json!({"region":"Hello","n":42,"o":{"flag":true}}));
        let good = [
            ("mcp-param-region", "=?base64?SGVsbG8=?="),
            ("mcp-param-n", "42.0"),
            ("mcp-param-flag", "true"),
        ];
        assert!(check(&full, &good).is_ok());
        // Nothing in the body, nothing expected.
        assert!(check(&args(json!({"region":null})), &[]).is_ok());
        for bad in [
            vec![("mcp-param-n", "42"), ("mcp-param-flag", "true")],
            vec![
                ("mcp-param-region", "=?base64?SGVsbG8?="),
                ("mcp-param-n", "42"),
                ("mcp-param-flag", "true"),
            ],
            vec![
                ("mcp-param-region", "=?base64?SGVs!!!bG8=?="),
                ("mcp-param-n", "42"),
                ("mcp-param-flag", "true"),
            ],
            vec![
                ("mcp-param-region", "Hellp"),
                ("mcp-param-n", "42"),
                ("mcp-param-flag", "true"),
            ],
            vec![
                ("mcp-param-region", "Hello"),
                ("mcp-param-n", "43"),
                ("mcp-param-flag", "true"),
            ],
            vec![
                ("mcp-param-region", "Hello"),
                ("mcp-param-n", "42"),
                ("mcp-param-flag", "TRUE"),
            ],
        ] {
            let e = check(&full, &bad).expect_err("refused");
            assert_eq!(e.code, crate::codes::HEADER_MISMATCH, "{bad:?}");
        }
        let e = check(&args(json!({})), &[("mcp-param-region", "x")])
            .expect_err("header without value");
        assert_eq!(e.code, crate::codes::HEADER_MISMATCH);
    }
}
