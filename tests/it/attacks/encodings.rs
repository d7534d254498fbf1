//! Encodings: invalid UTF-8 anywhere in the body, base64 header values decoded once and
//! strictly, control bytes in header values, routing headers given twice.

use serde_json::json;

use super::{Target, greet, rpc};
use crate::harness::http::Request;
use crate::harness::http::tcp::exchange;
use crate::harness::spec::{VERSION, text_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_anywhere_in_the_body_is_a_parse_error() {
    let t = Target::start().await;
    let valid = greet(json!(1), "x").body;
    let at = |needle: &[u8], insert: &[u8]| {
        let i = valid
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("needle")
            + needle.len();
        [&valid[..i], insert, &valid[i..]].concat()
    };
    for (what, body) in [
        ("0xff inside the name", at(b"\"name\":\"x", &[0xff])),
        ("0xff outside strings", at(b"\"id\":1", &[0xff])),
        ("a lone continuation byte", at(b"\"name\":\"x", &[0x80])),
        ("an overlong slash", at(b"\"name\":\"x", &[0xc0, 0xaf])),
        (
            "a UTF-8-encoded surrogate",
            at(b"\"name\":\"x", &[0xed, 0xa0, 0x80]),
        ),
        ("a truncated sequence", at(b"\"name\":\"x", &[0xe2, 0x82])),
        (
            "beyond U+10FFFF",
            at(b"\"name\":\"x", &[0xf4, 0x90, 0x80, 0x80]),
        ),
        ("in a key", at(b"{\"", &[0xfe])),
        ("in the method", at(b"\"method\":\"tools", &[0xff])),
        (
            "a byte-order mark",
            [&[0xef, 0xbb, 0xbf][..], &valid].concat(),
        ),
        (
            "UTF-16",
            String::from_utf8_lossy(&valid)
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
        ("an escaped lone surrogate", at(b"\"name\":\"x", b"\\ud800")),
        (
            "an escaped reversed pair",
            at(b"\"name\":\"x", b"\\udc00\\ud800"),
        ),
    ] {
        Request {
            body,
            ..greet(json!(1), "x")
        }
        .send_to_app(&t.app)
        .await
        .error(what, 400, -32700, None);
    }
    // A charset parameter changes nothing: the body is still read as UTF-8.
    Request {
        body: at(b"\"name\":\"x", &[0xe9]),
        ..greet(json!(1), "x")
    }
    .set("content-type", "application/json; charset=iso-8859-1")
    .send_to_app(&t.app)
    .await
    .error("Latin-1 é with charset=iso-8859-1", 400, -32700, None);

    t.finish().await;
}

fn b64(raw: &[u8]) -> String {
    use base64::Engine;
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base64_header_values_are_decoded_once_and_strictly() {
    let t = Target::start().await;
    let unknown = |id: i64, name: &str| {
        rpc(
            json!(id),
            "tools/call",
            json!({ "name": name, "arguments": {} }),
        )
    };

    // Refused: the decoded value is not the body's, or there is no valid decoding.
    for (what, name) in [
        ("encoded CR LF", b64(b"greet\r\n")),
        (
            "encoded CR LF and a header",
            b64(b"greet\r\nMcp-Name: greet"),
        ),
        ("encoded NUL", b64(b"greet\0")),
        ("encoded non-UTF-8", "=?base64?/w==?=".to_owned()),
        ("encoded latin-1 é", b64(b"gr\xe9et")),
        ("double encoding", b64(b64(b"greet").as_bytes())),
        ("missing padding", "=?base64?Z3JlZXQ?=".to_owned()),
        ("padding in the middle", "=?base64?Z3Jl=ZXQ=?=".to_owned()),
        ("inner spaces", "=?base64? Z3JlZXQ= ?=".to_owned()),
        ("URL-safe alphabet", "=?base64?Z3JlZXQ_?=".to_owned()),
        ("upper-case sentinel", "=?BASE64?Z3JlZXQ=?=".to_owned()),
        ("no closing sentinel", "=?base64?Z3JlZXQ=".to_owned()),
        ("empty payload", "=?base64??=".to_owned()),
        ("raw obs-text", "gr\u{e9}et".to_owned()),
    ] {
        greet(json!(what), "x")
            .set("mcp-name", name.as_bytes())
            .send_to_app(&t.app)
            .await
            .error(&format!("Mcp-Name {what}"), 400, -32020, Some(&json!(what)));
    }
    // The same tricks on the other two routing headers.
    for (header, value) in [
        ("mcp-method", b64(b"tools/call\r\n")),
        ("mcp-method", b64(b64(b"tools/call").as_bytes())),
        ("mcp-method", "=?base64?dG9vbHMvY2FsbA?=".to_owned()),
        ("mcp-protocol-version", b64(b"2026-07-28\n")),
        ("mcp-protocol-version", "=?base64?/w==?=".to_owned()),
        (
            "mcp-protocol-version",
            b64(b64(VERSION.as_bytes()).as_bytes()),
        ),
    ] {
        greet(json!(7), "x")
            .set(header, value.as_bytes())
            .send_to_app(&t.app)
            .await
            .error(&format!("{header}: {value}"), 400, -32020, Some(&json!(7)));
    }

    // Accepted: every routing header encoded, with whitespace around.
    let result = greet(json!(8), "enc")
        .set("mcp-protocol-version", b64(VERSION.as_bytes()))
        .set("mcp-method", format!(" {}\t", b64(b"tools/call")))
        .set("mcp-name", b64(b"greet"))
        .send_to_app(&t.app)
        .await
        .result("every header encoded", &json!(8));
    assert_eq!(text_of(&result), "Hello, enc!", "{result}");

    // A body value that itself looks encoded: the header must be its encoding, and the
    // literal text decodes to something else.
    let looks_encoded = b64(b"greet");
    unknown(9, &looks_encoded)
        .set("mcp-name", looks_encoded.as_bytes())
        .send_to_app(&t.app)
        .await
        .error(
            "literal sentinel text as Mcp-Name",
            400,
            -32020,
            Some(&json!(9)),
        );
    let answer = unknown(10, &looks_encoded)
        .set("mcp-name", b64(looks_encoded.as_bytes()))
        .send_to_app(&t.app)
        .await;
    let error = answer.error("sentinel text, encoded", 200, -32602, Some(&json!(10)));
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool")),
        "it reached the tool lookup: {error}"
    );
    // Body values with CR LF or non-ASCII match only their encoding, and reach the
    // tool lookup (an unknown tool) without anything being injected.
    for (id, name) in [
        (11, "greet\r\nX-Injected: 1"),
        (12, "gr\u{e9}et \u{1f44b}"),
        (13, " greet "),
        (14, "Pz8/"),
    ] {
        let answer = unknown(id, name).send_to_app(&t.app).await;
        answer.error(&format!("tool {name:?}"), 200, -32602, Some(&json!(id)));
        assert!(
            answer.header("x-injected").is_none(),
            "{:?}",
            answer.headers
        );
    }
    // "???" encodes as Pz8/ in the standard alphabet and Pz8_ in the URL-safe one.
    unknown(15, "???")
        .set("mcp-name", "=?base64?Pz8_?=")
        .send_to_app(&t.app)
        .await
        .error("URL-safe encoding of ???", 400, -32020, Some(&json!(15)));
    unknown(16, "???")
        .set("mcp-name", "=?base64?Pz8/?=")
        .send_to_app(&t.app)
        .await
        .error("standard encoding of ???", 200, -32602, Some(&json!(16)));

    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_bytes_in_header_values_are_refused_at_the_door() {
    let t = Target::start().await;
    let addr = t.addr();
    // Sanity: the bare TCP path itself gets an ordinary answer.
    let ok = greet(json!(1), "tcp")
        .send_tcp(addr)
        .await
        .answer("plain TCP");
    assert_eq!(text_of(&ok.result("plain TCP", &json!(1))), "Hello, tcp!");

    for (header, value) in [
        ("mcp-name", &b"gre\0et"[..]),
        ("mcp-name", b"greet\0"),
        ("mcp-name", b"gre\ret"),
        ("mcp-name", b"greet\r"),
        ("mcp-name", b"gre\neet"),
        ("mcp-name", b"gre\r\n et"),
        ("mcp-name", b"gre\r\n\tet"),
        ("mcp-name", b"greet\x7f"),
        ("mcp-name", b"gre\x1bet"),
        ("mcp-method", b"tools/call\0"),
        ("mcp-method", b"tools/\rcall"),
        ("mcp-method", b"tools/\ncall"),
        ("mcp-protocol-version", b"2026-07-28\0"),
        ("mcp-protocol-version", b"2026-\r07-28"),
        ("mcp-protocol-version", b"2026-\n07-28"),
    ] {
        let what = format!("{header}: {:?}", String::from_utf8_lossy(value));
        greet(json!(2), "x")
            .set(header, value)
            .send_tcp(addr)
            .await
            .assert_refused(&what);
    }
    // Malformed header lines around otherwise valid routing headers.
    for (what, line) in [
        ("a space before the colon", &b"Mcp-Name : greet"[..]),
        ("a NUL in a header name", b"Mcp-Na\0me: greet"),
        ("a header line without a colon", b"Mcp-Name greet"),
        ("a lone CR line", b"\r"),
    ] {
        let mut wire = greet(json!(3), "x").unset("mcp-name").wire(addr);
        let at = wire
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of head")
            + 2;
        wire.splice(at..at, [line, b"\r\n"].concat());
        exchange(addr, wire).await.assert_refused(what);
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_routing_headers_are_refused() {
    let t = Target::start().await;
    let addr = t.addr();
    for (header, good, bad) in [
        ("mcp-name", "greet", "test_logging_tool"),
        ("mcp-method", "tools/call", "tools/list"),
        ("mcp-protocol-version", VERSION, "2025-11-25"),
    ] {
        for (order, first, second) in [("good first", good, bad), ("bad first", bad, good)] {
            let what = format!("{header} twice, {order}");
            let req = greet(json!(what), "x")
                .set(header, first)
                .add(header, second);
            req.send_to_app(&t.app)
                .await
                .error(&what, 400, -32020, Some(&json!(what)));
            req.send_tcp(addr)
                .await
                .answer(&what)
                .error(&what, 400, -32020, Some(&json!(what)));
        }
    }
    t.finish().await;
}
