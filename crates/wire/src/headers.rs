//! Streamable HTTP request headers that mirror the body (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`) and their value encoding.
//!
//! Values that are not plain ASCII travel as `=?base64?{base64(utf8)}?=`; a server must
//! decode before comparing, and must answer any mismatch with `-32020`.

use base64::Engine;
use serde_json::Value;

use crate::{ErrorObject, Request};

pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub const METHOD: &str = "mcp-method";
pub const NAME: &str = "mcp-name";
/// The session of a 2025-era client (those revisions only; 2026-07-28 has no sessions).
pub const SESSION_ID: &str = "mcp-session-id";

/// Decodes one header value: trims surrounding whitespace, unwraps the base64 sentinel,
/// and refuses control characters or raw non-ASCII bytes.
pub fn decode_value(raw: &[u8]) -> Result<String, String> {
    let trimmed = trim_ascii_ws(raw);
    if let Some(bad) = trimmed
        .iter()
        .find(|&&b| !(b == b'\t' || (0x20..0x7f).contains(&b)))
    {
        return Err(format!(
            "header value contains the byte 0x{bad:02x}; non-ASCII values must use the =?base64?…?= form"
        ));
    }
    // All bytes are ASCII here, so this cannot fail.
    let text = std::str::from_utf8(trimmed).map_err(|e| e.to_string())?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        None => Ok(text.to_owned()),
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| "header value has an invalid =?base64?…?= encoding".to_owned())?;
            String::from_utf8(bytes)
                .map_err(|_| "header value's =?base64?…?= payload is not UTF-8".to_owned())
        }
    }
}

/// Encodes a value for a header, using the base64 form only when it has to.
pub fn encode_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
        && (!value.starts_with("=?base64?") || !value.ends_with("?="));
    if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

fn trim_ascii_ws(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if *first == b' ' || *first == b'\t' {
            b = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = b {
        if *last == b' ' || *last == b'\t' {
            b = rest;
        } else {
            break;
        }
    }
    b
}

/// The body value a request's `Mcp-Name` must mirror, if the method has one.
pub fn name_source(request: &Request) -> Option<&str> {
    let key = match request.method.as_str() {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    request.params.get(key).and_then(Value::as_str)
}

/// The routing headers of one POST, as raw bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoutingHeaders<'a> {
    pub protocol_version: Option<&'a [u8]>,
    pub method: Option<&'a [u8]>,
    pub name: Option<&'a [u8]>,
}

/// Checks the routing headers against the body of a request. `meta_version` is the
/// `_meta` protocol version when it could be read.
///
/// A missing `Mcp-Name` is tolerated on `tasks/*` (deployed clients omit it) but a
/// present one must match.
pub fn check_request(
    headers: RoutingHeaders<'_>,
    request: &Request,
    meta_version: Option<&str>,
) -> Result<(), ErrorObject> {
    let version = match headers.protocol_version {
        Some(raw) => Some(decode_value(raw).map_err(|e| bad("MCP-Protocol-Version", &e))?),
        None => None,
    };
    match (&version, meta_version) {
        (None, _) => {
            return Err(ErrorObject::header_mismatch(
                "the MCP-Protocol-Version header is required",
            ));
        }
        (Some(h), Some(m)) if h != m => {
            return Err(ErrorObject::header_mismatch(format!(
                "MCP-Protocol-Version header value '{}' does not match body value '{}'",
                clip(h),
                clip(m)
            )));
        }
        _ => {}
    }

    match headers.method {
        None => {
            return Err(ErrorObject::header_mismatch(
                "the Mcp-Method header is required",
            ));
        }
        Some(raw) => {
            let method = decode_value(raw).map_err(|e| bad("Mcp-Method", &e))?;
            if method != request.method {
                return Err(ErrorObject::header_mismatch(format!(
                    "Mcp-Method header value '{}' does not match body value '{}'",
                    clip(&method),
                    clip(&request.method)
                )));
            }
        }
    }

    let expected = name_source(request);
    match (headers.name, expected) {
        (Some(raw), expected) => {
            let name = decode_value(raw).map_err(|e| bad("Mcp-Name", &e))?;
            match expected {
                Some(body) if body == name => {}
                Some(body) => {
                    return Err(ErrorObject::header_mismatch(format!(
                        "Mcp-Name header value '{}' does not match body value '{}'",
                        clip(&name),
                        clip(body)
                    )));
                }
                // A name header on a method without a name is noise, not an attack.
                None => {}
            }
        }
        (None, Some(_)) if request.method.starts_with("tasks/") => {}
        (None, Some(_)) => {
            return Err(ErrorObject::header_mismatch(format!(
                "the Mcp-Name header is required for {}",
                request.method
            )));
        }
        (None, None) => {}
    }
    Ok(())
}

/// Echoes at most the start of a client-supplied value in an error message.
fn clip(value: &str) -> String {
    const MAX: usize = 100;
    if value.chars().count() <= MAX {
        value.to_owned()
    } else {
        format!("{}…", value.chars().take(MAX).collect::<String>())
    }
}

fn bad(header: &str, detail: &str) -> ErrorObject {
    ErrorObject::header_mismatch(format!("invalid {header} header: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_values() {
        assert_eq!(decode_value(b"  tools/call\t").unwrap(), "tools/call");
        assert_eq!(
            decode_value(b"=?base64?SGVsbG8g8J+Riw==?=").unwrap(),
            "Hello 👋"
        );
        assert_eq!(decode_value(b"=?base64?SGk=?=").unwrap(), "Hi");
        // Padding is required, as the conformance suite's probes expect.
        assert!(decode_value(b"=?base64?SGk?=").is_err());
        // Without both sentinels the value is literal text.
        assert_eq!(decode_value(b"=?base64?SGk=").unwrap(), "=?base64?SGk=");
        assert!(decode_value(b"a\x01b").is_err());
        assert!(decode_value("é".as_bytes()).is_err());
        assert!(decode_value(b"=?base64?***?=").is_err());
        assert!(decode_value(b"=?base64?/w==?=").is_err());
    }

    #[test]
    fn encodes_round_trip() {
        for v in ["plain", " padded ", "naïve", "=?base64?x?=", ""] {
            assert_eq!(decode_value(encode_value(v).as_bytes()).unwrap(), v);
        }
        assert_eq!(encode_value("plain"), "plain");
    }

    fn request(method: &str, params: serde_json::Value) -> Request {
        Request {
            id: 1.into(),
            method: method.into(),
            params: params.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn checks_headers() {
        let call = request("tools/call", json!({"name":"greet"}));
        let h = |v: &'static str, m: &'static str, n: Option<&'static str>| RoutingHeaders {
            protocol_version: Some(v.as_bytes()),
            method: Some(m.as_bytes()),
            name: n.map(str::as_bytes),
        };
        assert!(
            check_request(
                h("2026-07-28", "tools/call", Some("greet")),
                &call,
                Some("2026-07-28")
            )
            .is_ok()
        );
        assert!(
            check_request(
                h("2026-07-28", "tasks/get", Some("greet")),
                &call,
                Some("2026-07-28")
            )
            .is_err()
        );
        assert!(
            check_request(
                h("2026-07-28", "tools/call", Some("x")),
                &call,
                Some("2026-07-28")
            )
            .is_err()
        );
        assert!(
            check_request(
                h("2026-07-28", "tools/call", None),
                &call,
                Some("2026-07-28")
            )
            .is_err()
        );
        assert!(
            check_request(
                h("2026-07-28", "tools/call", Some("greet")),
                &call,
                Some("v999")
            )
            .is_err()
        );

        let get = request("tasks/get", json!({"taskId":"abc"}));
        assert!(check_request(h("2026-07-28", "tasks/get", None), &get, None).is_ok());
        assert!(check_request(h("2026-07-28", "tasks/get", Some("abd")), &get, None).is_err());
    }
}
