//! (b) Any header values around a valid request: `-32020` exactly when the routing
//! headers do not mirror the body, by the spec's rules as modelled here.

use std::collections::BTreeSet;
use std::sync::Mutex;

use base64::Engine as _;
use proptest::prelude::*;
use reqwest::header::HeaderValue;

use super::{
    Expect, app, assert_reached, b64, bases, check, contract, decode, encode, fail, name_source,
    outcome, post,
};
use crate::harness::spec::VERSION;

/// How one routing header is set, relative to the value it should mirror.
#[derive(Debug, Clone)]
enum HeaderChoice {
    Absent,
    Faithful,
    Base64,
    Padded,
    /// Base64 of the value, with its `=` padding removed.
    Unpadded,
    /// URL-safe alphabet instead of the standard one.
    UrlSafe,
    /// Base64 of the base64 form.
    Double,
    /// Base64 of the value with CR LF appended.
    EncodedCrLf,
    UpperCase,
    /// Raw UTF-8, not encoded.
    RawUtf8,
    Bytes(Vec<u8>),
    Sentinel(String),
}

fn header_choice() -> impl Strategy<Value = HeaderChoice> {
    // Every byte a `HeaderValue` can hold: HT, visible ASCII, space, obs-text.
    let byte = prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff];
    prop_oneof![
        2 => Just(HeaderChoice::Absent),
        4 => Just(HeaderChoice::Faithful),
        2 => Just(HeaderChoice::Base64),
        1 => Just(HeaderChoice::Padded),
        1 => Just(HeaderChoice::Unpadded),
        1 => Just(HeaderChoice::UrlSafe),
        1 => Just(HeaderChoice::Double),
        1 => Just(HeaderChoice::EncodedCrLf),
        1 => Just(HeaderChoice::UpperCase),
        1 => Just(HeaderChoice::RawUtf8),
        2 => proptest::collection::vec(byte, 0..40).prop_map(HeaderChoice::Bytes),
        1 => "[A-Za-z0-9+/=_ -]{0,16}".prop_map(HeaderChoice::Sentinel),
    ]
}

fn header_value(choice: &HeaderChoice, mirrored: &str) -> Option<Vec<u8>> {
    let engine = &base64::engine::general_purpose::STANDARD;
    Some(match choice {
        HeaderChoice::Absent => return None,
        HeaderChoice::Faithful => encode(mirrored).into_bytes(),
        HeaderChoice::Base64 => b64(mirrored.as_bytes()).into_bytes(),
        HeaderChoice::Padded => format!(" \t{} ", encode(mirrored)).into_bytes(),
        HeaderChoice::Unpadded => format!(
            "=?base64?{}?=",
            engine.encode(mirrored).trim_end_matches('=')
        )
        .into_bytes(),
        HeaderChoice::UrlSafe => format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::URL_SAFE.encode(mirrored)
        )
        .into_bytes(),
        HeaderChoice::Double => b64(b64(mirrored.as_bytes()).as_bytes()).into_bytes(),
        HeaderChoice::EncodedCrLf => b64(format!("{mirrored}\r\n").as_bytes()).into_bytes(),
        HeaderChoice::UpperCase => mirrored.to_uppercase().into_bytes(),
        HeaderChoice::RawUtf8 => mirrored.as_bytes().to_vec(),
        HeaderChoice::Bytes(b) => b.clone(),
        HeaderChoice::Sentinel(s) => format!("=?base64?{s}?=").into_bytes(),
    })
}

#[test]
fn any_routing_header_values_get_minus_32020_exactly_when_they_do_not_mirror_the_body() {
    let app = app();
    let seen = Mutex::new(BTreeSet::new());
    let bases = bases();
    let strategy = (
        0..bases.len(),
        header_choice(),
        header_choice(),
        header_choice(),
    );
    let enough = check(1500, strategy, |(i, pv, method, name)| {
        let (body, expect) = &bases[i];
        let body_method = body["method"].as_str().unwrap_or_default();
        let source = name_source(body);
        let mut headers = Vec::new();
        let pv = header_value(&pv, VERSION);
        let method = header_value(&method, body_method);
        // A name header on a method without a name mirrors nothing in particular.
        let name = header_value(&name, source.unwrap_or("anything"));
        for (n, v) in [
            ("mcp-protocol-version", &pv),
            ("mcp-method", &method),
            ("mcp-name", &name),
        ] {
            if let Some(v) = v
                && HeaderValue::from_bytes(v).is_ok()
            {
                headers.push((n, v.clone()));
            }
        }
        let sent = |n: &str| headers.iter().find(|(h, _)| *h == n).map(|(_, v)| v);
        let mirrors = sent("mcp-protocol-version")
            .and_then(|v| decode(v))
            .as_deref()
            == Some(VERSION)
            && sent("mcp-method").and_then(|v| decode(v)).as_deref() == Some(body_method)
            && match (sent("mcp-name").map(|v| decode(v)), source) {
                (Some(None), _) => false,
                (Some(Some(n)), Some(s)) => n == s,
                (Some(Some(_)), None) => true,
                (None, Some(_)) => body_method.starts_with("tasks/"),
                (None, None) => true,
            };

        let answer = post(&app, &headers, body.to_string().into_bytes());
        let json = contract(&answer)?.ok_or_else(|| fail("202 for a request", &answer))?;
        seen.lock()
            .expect("lock")
            .insert(outcome(&answer, Some(&json)));
        prop_assert_eq!(&json["id"], &body["id"], "id echo");
        let code = json["error"]["code"].as_i64();
        if mirrors {
            match expect {
                Expect::Result => prop_assert_eq!(
                    (answer.status, code),
                    (200, None),
                    "mirroring headers {:?} refused: {}",
                    headers,
                    json
                ),
                Expect::Error(status, c) => prop_assert_eq!(
                    (answer.status, code),
                    (*status, Some(*c)),
                    "mirroring headers {:?}: {}",
                    headers,
                    json
                ),
            }
        } else {
            prop_assert_eq!(
                (answer.status, code),
                (400, Some(-32020)),
                "headers {:?} do not mirror {}: {}",
                headers,
                body,
                json
            );
        }
        Ok(())
    });
    assert_reached(
        enough,
        &seen,
        &[(200, 0), (200, -32602), (404, -32601), (400, -32020)],
    );
}
