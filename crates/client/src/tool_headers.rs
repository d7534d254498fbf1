//! SEP-2243 custom headers: tool parameters annotated with `x-mcp-header` are mirrored
//! into `Mcp-Param-{Name}` headers, and a tool whose annotations break the rules is not
//! offered at all (so one malformed definition does not hide the others).

use std::collections::HashSet;

use mcp_tasks_wire::headers::encode_value;
use serde_json::{Map, Value};

const KEY: &str = "x-mcp-header";
/// Integers beyond this are not exact in JavaScript, so they cannot be mirrored.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

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

/// The `Mcp-Param-*` headers of one call: present, non-null values only, encoded as the
/// transport spec says (strings as-is, integers in decimal, booleans lowercase, base64
/// when not plain ASCII).
pub(crate) fn param_headers(
    params: &[HeaderParam],
    arguments: &Map<String, Value>,
) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    for param in params {
        let mut value = None;
        let mut level = Some(arguments);
        for (i, key) in param.path.iter().enumerate() {
            let Some(map) = level else { break };
            let v = map.get(key);
            if i + 1 == param.path.len() {
                value = v;
            } else {
                level = v.and_then(Value::as_object);
            }
        }
        let text = match value {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) if i.abs() <= MAX_SAFE_INTEGER => i.to_string(),
                _ => {
                    return Err(format!(
                        "argument {} = {n} cannot be mirrored into Mcp-Param-{}: not a safe integer",
                        param.path.join("."),
                        param.name
                    ));
                }
            },
            Some(other) => {
                return Err(format!(
                    "argument {} is {other}, which cannot be mirrored into Mcp-Param-{}",
                    param.path.join("."),
                    param.name
                ));
            }
        };
        headers.push((format!("mcp-param-{}", param.name), encode_value(&text)));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nested_properties_are_reachable_and_arrays_are_not() {
        let ok = json!({"type":"object","properties":{
            "a":{"type":"string","x-mcp-header":"A"},
            "o":{"type":"object","properties":{"b":{"type":"integer","x-mcp-header":"B"}}}}});
        let params = header_params(&ok).expect("valid");
        assert_eq!(params.len(), 2);
        let args = json!({"a":"x","o":{"b":7}});
        let headers = param_headers(&params, args.as_object().expect("object")).expect("headers");
        assert_eq!(
            headers,
            vec![
                ("mcp-param-A".to_owned(), "x".to_owned()),
                ("mcp-param-B".to_owned(), "7".to_owned())
            ]
        );
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
    fn values_are_encoded_and_nulls_omitted() {
        let schema = json!({"type":"object","properties":{
            "s":{"type":"string","x-mcp-header":"S"},
            "b":{"type":"boolean","x-mcp-header":"B"},
            "n":{"type":"boolean","x-mcp-header":"N"}}});
        let params = header_params(&schema).expect("valid");
        let args = json!({"s":" padded ","b":false,"n":null});
        let headers = param_headers(&params, args.as_object().expect("object")).expect("headers");
        assert_eq!(
            headers,
            vec![
                ("mcp-param-B".to_owned(), "false".to_owned()),
                (
                    "mcp-param-S".to_owned(),
                    "=?base64?IHBhZGRlZCA=?=".to_owned()
                ),
            ]
        );
    }
}
