//! SEP-2243 custom headers: tool parameters annotated with `x-mcp-header` are mirrored
//! into `Mcp-Param-{Name}` headers, and a tool whose annotations break the rules is not
//! offered at all (so one malformed definition does not hide the others). Reading the
//! annotations is shared with the server (`mcp_tasks_wire::param_headers`).

use mcp_tasks_wire::headers::encode_value;
pub use mcp_tasks_wire::param_headers::{HeaderParam, header_params};
use mcp_tasks_wire::param_headers::{MAX_SAFE_INTEGER, argument_at};
use serde_json::{Map, Value};

/// The `Mcp-Param-*` headers of one call: present, non-null values only, encoded as the
/// transport spec says (strings as-is, integers in decimal, booleans lowercase, base64
/// when not plain ASCII).
pub(crate) fn param_headers(
    params: &[HeaderParam],
    arguments: &Map<String, Value>,
) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    for param in params {
        let value = argument_at(param, arguments);
        let text = match value {
            None => continue,
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

    // Which annotations are rejected is `header_params`'s business, tested where it lives
    // (`mcp_tasks_wire::param_headers`); here only what the client does with the result.
    #[test]
    fn nested_properties_are_mirrored() {
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
