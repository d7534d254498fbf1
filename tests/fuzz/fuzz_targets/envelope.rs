//! Fuzzes everything `mcp-tasks-wire` does with untrusted bytes before a method runs: the
//! strict JSON parser, the JSON-RPC envelope, `params._meta`, and the routing headers
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) with their `=?base64?…?=` form.
//!
//! Input layout (`make_seeds.py` writes the committed seeds in it):
//!
//! ```text
//! byte 0        flags: bit 0 protocol-version header present, bit 1 Mcp-Method,
//!               bit 2 Mcp-Name; bit 3 also parse under a small depth limit, taken
//!               from bits 4..=7 (0..=15)
//! then, for each present header in that order: one length byte L and L value bytes
//!               (fewer if the input ends first)
//! the rest      the HTTP body
//! ```
//!
//! Beyond "never panics", every call's result is checked against invariants that must
//! hold for any input; a violated invariant panics, which libFuzzer reports as a crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_tasks_wire::headers::{self, RoutingHeaders};
use mcp_tasks_wire::jsonrpc::{EnvelopeError, Payload, Response, parse_message};
use mcp_tasks_wire::strict::{self, JsonError, JsonLimits};
use mcp_tasks_wire::{Incoming, Request, RequestId, RequestMeta, codes, meta_keys};
use serde_json::{Map, Value, json};

struct Input<'a> {
    protocol_version: Option<&'a [u8]>,
    method: Option<&'a [u8]>,
    name: Option<&'a [u8]>,
    small_limit: Option<usize>,
    body: &'a [u8],
}

fn split(data: &[u8]) -> Option<Input<'_>> {
    let (&flags, mut rest) = data.split_first()?;
    let mut take = |present: bool| -> Option<&[u8]> {
        if !present {
            return None;
        }
        let (&len, after) = rest.split_first().unwrap_or((&0, rest));
        let len = usize::from(len).min(after.len());
        let (value, after) = after.split_at(len);
        rest = after;
        Some(value)
    };
    let protocol_version = take(flags & 1 != 0);
    let method = take(flags & 2 != 0);
    let name = take(flags & 4 != 0);
    Some(Input {
        protocol_version,
        method,
        name,
        small_limit: (flags & 8 != 0).then_some(usize::from(flags >> 4)),
        body: rest,
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = split(data) else {
        return;
    };

    let plain: Option<Value> = serde_json::from_slice(input.body).ok();
    let strict = strict::parse(input.body, JsonLimits::default());
    check_strict(plain.as_ref(), &strict, JsonLimits::default());
    if let Some(max_depth) = input.small_limit {
        let limits = JsonLimits { max_depth };
        let small = strict::parse(input.body, limits);
        check_strict(plain.as_ref(), &small, limits);
        // A smaller limit only ever refuses more.
        if let Ok(v) = &small {
            assert_eq!(
                strict.as_ref().ok(),
                Some(v),
                "limit {max_depth} accepted more"
            );
        }
    }

    let parsed = parse_message(input.body, JsonLimits::default());
    check_envelope(strict.as_ref().ok(), &parsed);

    // `_meta` of whatever `params` object the body has, valid envelope or not.
    if let Some(Value::Object(params)) = strict.as_ref().ok().and_then(|v| v.get("params")) {
        check_meta(params, &RequestMeta::from_params(params));
    }

    for raw in [input.protocol_version, input.method, input.name]
        .into_iter()
        .flatten()
    {
        check_decode(raw);
    }
    // Any text at all survives encode → decode.
    check_round_trip(&String::from_utf8_lossy(input.body));
    if let Ok(text) = std::str::from_utf8(input.body) {
        check_round_trip(text);
    }

    if let Ok(Incoming::Request(request)) = &parsed {
        let meta = RequestMeta::from_params(&request.params).ok();
        let meta_version = meta.as_ref().map(|m| m.protocol_version.as_str());
        let routing = RoutingHeaders {
            protocol_version: input.protocol_version,
            method: input.method,
            name: input.name,
        };
        check_headers(routing, request, meta_version);

        // A client that mirrors the body faithfully, with the encoding the spec gives,
        // is always let through.
        let version = headers::encode_value(meta_version.unwrap_or("2026-07-28"));
        let method = headers::encode_value(&request.method);
        let name = headers::name_source(request).map(headers::encode_value);
        let faithful = RoutingHeaders {
            protocol_version: Some(version.as_bytes()),
            method: Some(method.as_bytes()),
            name: name.as_deref().map(str::as_bytes),
        };
        assert_eq!(
            headers::check_request(faithful, request, meta_version),
            Ok(()),
            "faithful headers refused for {request:?}"
        );
        check_headers(faithful, request, meta_version);
    }
});

/// Nesting depth of a value: scalars 0, `[]` and `{}` 1.
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The strict parser accepts exactly the JSON that `serde_json` accepts, minus documents
/// nested deeper than the limit and documents with a duplicate key.
fn check_strict(plain: Option<&Value>, strict: &Result<Value, JsonError>, limits: JsonLimits) {
    match (strict, plain) {
        (Ok(v), Some(p)) => {
            assert_eq!(v, p, "strict and plain parses differ");
            assert!(depth(v) <= limits.max_depth, "accepted depth {}", depth(v));
        }
        (Ok(v), None) => panic!("strict accepted what serde_json refuses: {v}"),
        (Err(JsonError::TooDeep { max_depth }), Some(p)) => {
            assert_eq!(*max_depth, limits.max_depth);
            assert!(
                depth(p) > limits.max_depth,
                "refused as too deep at depth {} (limit {})",
                depth(p),
                limits.max_depth
            );
        }
        (Err(JsonError::Invalid(e)), Some(p)) => {
            // Only a duplicate key can make valid JSON invalid here (unless it is too
            // deep, which must then be the reason given instead).
            assert!(
                e.contains("duplicate object key"),
                "valid JSON refused with {e:?}: {p}"
            );
            assert!(
                depth(p) <= limits.max_depth,
                "too deep, yet refused as {e:?}"
            );
        }
        (Err(JsonError::Invalid(e)), None) => assert!(!e.is_empty()),
        // The depth scan runs before parsing; for invalid JSON either reason will do.
        (Err(JsonError::TooDeep { .. }), None) => {}
    }
}

fn assert_id_ok(id: &RequestId) {
    match id {
        RequestId::Number(n) => assert!(n.is_i64() || n.is_u64(), "non-integer id {n}"),
        RequestId::String(_) => {}
    }
    // An id serializes as itself and comes back equal.
    let v = id.to_value();
    assert_eq!(serde_json::to_value(id).ok().as_ref(), Some(&v));
    assert_eq!(
        serde_json::from_value::<RequestId>(v).ok().as_ref(),
        Some(id)
    );
    let _ = id.to_string();
}

/// The id a body's `"id"` member must become, if it can be one.
fn expected_id(v: &Value) -> Option<RequestId> {
    match v.get("id")? {
        Value::String(s) => Some(RequestId::String(s.clone())),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(RequestId::Number(n.clone())),
        _ => None,
    }
}

fn check_envelope(value: Option<&Value>, parsed: &Result<Incoming, EnvelopeError>) {
    let Some(value) = value else {
        // Not strict JSON: always a parse error, never an id.
        let err = parsed.as_ref().expect_err("non-JSON body accepted");
        assert_eq!(err.error.code, codes::PARSE_ERROR);
        assert_eq!(err.id, None);
        check_error_response(err);
        return;
    };
    match parsed {
        Ok(Incoming::Request(r)) => {
            assert_id_ok(&r.id);
            assert_eq!(Some(&r.id), expected_id(value).as_ref());
            assert_eq!(value["jsonrpc"], json!("2.0"));
            assert_eq!(value["method"].as_str(), Some(r.method.as_str()));
            match value.get("params") {
                None => assert!(r.params.is_empty()),
                Some(p) => assert_eq!(p.as_object(), Some(&r.params)),
            }
            // The answer echoes the id with its JSON type, and reads back the same.
            let response = Response::result(r.id.clone(), json!({ "resultType": "complete" }));
            let wire = response.to_json();
            assert_eq!(wire["id"], r.id.to_value());
            assert_eq!(wire["jsonrpc"], json!("2.0"));
            let back: Response = serde_json::from_value(wire).expect("a response reads back");
            assert_eq!(back, response);
        }
        Ok(Incoming::Notification(n)) => {
            assert!(
                value.get("id").is_none(),
                "a message with an id is a request"
            );
            assert_eq!(value["jsonrpc"], json!("2.0"));
            assert_eq!(value["method"].as_str(), Some(n.method.as_str()));
            assert!(value.get("params").is_none_or(Value::is_object));
        }
        Err(err) => {
            // Valid strict JSON is never a parse error; the envelope is what is wrong.
            assert_eq!(err.error.code, codes::INVALID_REQUEST, "{err:?}");
            if let Some(id) = &err.id {
                assert_id_ok(id);
                assert_eq!(Some(id), expected_id(value).as_ref());
            } else {
                // An id that could be read is always echoed, except where the body is
                // not an object at all.
                assert!(
                    !value.is_object() || expected_id(value).is_none(),
                    "readable id dropped: {err:?}"
                );
            }
            check_error_response(err);
        }
    }
}

fn check_error_response(err: &EnvelopeError) {
    assert!(!err.error.message.is_empty());
    let response = Response::error(err.id.clone(), err.error.clone());
    let wire = response.to_json();
    assert_eq!(wire.get("id").is_some(), err.id.is_some(), "{wire}");
    assert!(wire.get("result").is_none());
    assert_eq!(wire["error"]["code"], json!(err.error.code));
    let back: Response = serde_json::from_value(wire).expect("an error response reads back");
    assert_eq!(back, response);
    assert!(matches!(back.payload, Payload::Error(_)));
}

fn check_meta(
    params: &Map<String, Value>,
    meta: &Result<RequestMeta, mcp_tasks_wire::ErrorObject>,
) {
    let body_meta = params.get("_meta").and_then(Value::as_object);
    match meta {
        Ok(m) => {
            let body_meta = body_meta.expect("_meta accepted without an object");
            assert_eq!(
                body_meta[meta_keys::PROTOCOL_VERSION].as_str(),
                Some(m.protocol_version.as_str())
            );
            assert_eq!(
                body_meta[meta_keys::CLIENT_CAPABILITIES].as_object(),
                Some(&m.client_capabilities.0)
            );
            assert_eq!(
                m.client_info.as_ref(),
                body_meta.get(meta_keys::CLIENT_INFO)
            );
            assert_eq!(m.progress_token.as_ref(), body_meta.get("progressToken"));
            // Capability questions never panic on what a client sent.
            let caps = &m.client_capabilities;
            let _ = caps.declares_tasks();
            let _ = caps.satisfies(&Value::Object(caps.0.clone()));
            assert!(caps.satisfies(&json!({})));
            for method in [
                "elicitation/create",
                "sampling/createMessage",
                "roots/list",
                "x",
            ] {
                let _ = caps.can_answer(method, params.get("arguments"));
            }
        }
        Err(e) => {
            assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
            let valid = body_meta.is_some_and(|m| {
                m.get(meta_keys::PROTOCOL_VERSION)
                    .is_some_and(Value::is_string)
                    && m.get(meta_keys::CLIENT_CAPABILITIES)
                        .is_some_and(Value::is_object)
            });
            assert!(!valid, "a valid _meta was refused: {e:?}");
        }
    }
}

fn trim(raw: &[u8]) -> &[u8] {
    let start = raw
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &raw[start..end.max(start)]
}

fn is_sentinel(text: &[u8]) -> bool {
    text.len() >= "=?base64??=".len() && text.starts_with(b"=?base64?") && text.ends_with(b"?=")
}

/// What `decode_value` must answer, from the spec's rules rather than from its code.
fn model_decode(raw: &[u8]) -> Option<String> {
    use base64::Engine as _;
    let t = trim(raw);
    if !t.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        return None;
    }
    if is_sentinel(t) {
        let inner = &t["=?base64?".len()..t.len() - 2];
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()?;
        return String::from_utf8(bytes).ok();
    }
    Some(String::from_utf8(t.to_vec()).expect("ASCII"))
}

fn check_decode(raw: &[u8]) {
    let decoded = headers::decode_value(raw);
    assert_eq!(
        decoded.as_ref().ok(),
        model_decode(raw).as_ref(),
        "decode {raw:?}"
    );
    match decoded {
        Ok(s) => check_round_trip(&s),
        Err(e) => assert!(!e.is_empty()),
    }
}

/// `encode_value` always yields a valid, canonical header value that decodes back.
fn check_round_trip(s: &str) {
    let encoded = headers::encode_value(s);
    let bytes = encoded.as_bytes();
    assert!(!bytes.is_empty(), "empty encoding of {s:?}");
    assert!(
        bytes.iter().all(|b| (0x20..0x7f).contains(b)),
        "encoding of {s:?} is not visible ASCII: {encoded:?}"
    );
    assert_eq!(trim(bytes), bytes, "encoding of {s:?} has outer whitespace");
    assert_eq!(
        headers::decode_value(bytes).as_deref(),
        Ok(s),
        "round trip of {s:?}"
    );
    // Text that would not read back as itself is always encoded; plain text is sent as
    // it is (text that merely looks like the sentinel may be encoded needlessly).
    let plain = !s.is_empty()
        && s.bytes().all(|b| (0x20..0x7f).contains(&b))
        && trim(s.as_bytes()) == s.as_bytes()
        && !is_sentinel(s.as_bytes());
    if !plain {
        assert_ne!(encoded, s, "{s:?} needs the =?base64?…?= form");
    } else if !s.starts_with("=?base64?") {
        assert_eq!(encoded, s, "{s:?} needs no encoding");
    }
}

/// `check_request` against the rules of the transport spec.
fn check_headers(routing: RoutingHeaders<'_>, request: &Request, meta_version: Option<&str>) {
    let result = headers::check_request(routing, request, meta_version);
    let decode = |h: Option<&[u8]>| h.map(model_decode);
    let expected_ok = (|| {
        let version = decode(routing.protocol_version)??;
        if meta_version.is_some_and(|m| m != version) {
            return None;
        }
        if decode(routing.method)?? != request.method {
            return None;
        }
        let source = headers::name_source(request);
        match decode(routing.name) {
            Some(None) => return None,
            Some(Some(name)) => {
                if source.is_some_and(|s| s != name) {
                    return None;
                }
            }
            None => {
                if source.is_some() && !request.method.starts_with("tasks/") {
                    return None;
                }
            }
        }
        Some(())
    })()
    .is_some();
    match &result {
        Ok(()) => assert!(
            expected_ok,
            "headers accepted against the rules: {request:?}"
        ),
        Err(e) => {
            assert!(!expected_ok, "headers refused against the rules: {e:?}");
            assert_eq!(e.code, codes::HEADER_MISMATCH, "{e:?}");
            assert!(!e.message.is_empty());
        }
    }
}
