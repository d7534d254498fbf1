//! Sizes: bodies over the limit refused before they are read, incomplete bodies, huge
//! headers, megabyte task ids.

use futures::StreamExt;
use serde_json::json;

use super::{BODY_LIMIT, Target, call_raw, greet, greet_padded, rpc};
use crate::harness::http::tcp::{Tcp, exchange, exchange_then, half_closed};
use crate::harness::http::{Answer, Request};
use crate::harness::spec::{tasks_meta, text_of};

/// A greet call padded to exactly `len` bytes with a `structuredContent` member of
/// params (which nothing reads: arguments have a smaller limit of their own).
fn greet_of_len(len: usize) -> Request {
    let padded = |pad: &str| {
        call_raw(
            "greet",
            &format!(
                r#"{{"name":"greet","arguments":{{"name":"big"}},"structuredContent":{{"text":"{pad}"}},"_meta":{}}}"#,
                tasks_meta()
            ),
        )
    };
    let pad = len - padded("").body.len();
    padded(&"x".repeat(pad))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_refused_before_they_are_read() {
    let t = Target::start().await;
    let addr = t.addr();

    // The limit is exact.
    let at = greet_of_len(BODY_LIMIT);
    assert_eq!(at.body.len(), BODY_LIMIT);
    let result = at
        .send_to_app(&t.app)
        .await
        .result("a body of exactly the limit", &json!(1));
    assert_eq!(text_of(&result), "Hello, big!", "{result}");
    greet_of_len(BODY_LIMIT + 1)
        .send_to_app(&t.app)
        .await
        .error("a body one byte over the limit", 413, -32600, None);

    // A 10 MB body, announced by Content-Length: answered after at most the limit is
    // read. Only 2 MB are ever sent and the connection stays open, so a server that
    // waited for the rest would never answer.
    let ten_mb = 10 * 1024 * 1024;
    let in_arguments = greet_padded(&format!(r#""{}""#, "a".repeat(ten_mb)));
    for (what, big) in [
        ("10 MB of structuredContent", greet_of_len(ten_mb)),
        ("10 MB of arguments", in_arguments),
    ] {
        let head_len = big.wire(addr).len() - big.body.len();
        let mut wire = big.wire(addr);
        wire.truncate(head_len + 2 * 1024 * 1024);
        exchange(addr, wire)
            .await
            .answer(what)
            .error(what, 413, -32600, None);
    }

    // The same without a length: chunked, 64 KiB at a time, stalling after 2 MB.
    let mut head = greet(json!(1), "x")
        .wire(addr)
        .split(|&b| b == b'\n')
        .take_while(|l| *l != b"\r")
        .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-length"))
        .flat_map(|l| [l, b"\n"].concat())
        .collect::<Vec<u8>>();
    head.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
    let chunk = [
        format!("{:x}\r\n", 64 * 1024).into_bytes(),
        vec![b' '; 64 * 1024],
        b"\r\n".to_vec(),
    ]
    .concat();
    let mut first = head;
    first.extend_from_slice(b"4\r\n{\"a\"\r\n");
    exchange_then(addr, first, vec![chunk; 32])
        .await
        .answer("10 MB chunked")
        .error("a chunked body over the limit", 413, -32600, None);

    // A body shorter than its Content-Length, then the client stops sending: the
    // truncated body is not served, and the server does not hang (see also
    // `an_incomplete_body_is_a_bad_request_not_a_large_one`).
    let mut short = greet(json!(2), "x").wire(addr);
    let cut = short.len() - 10;
    short.truncate(cut);
    let answer = half_closed(addr, short).await.answer("a truncated body");
    let body = answer.jsonrpc("a truncated body");
    assert!(
        answer.status >= 400 && answer.status < 500 && body.get("error").is_some(),
        "a truncated body: {}",
        answer.excerpt()
    );

    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_body_is_a_bad_request_not_a_large_one() {
    let t = Target::start().await;
    let addr = t.addr();
    // Ten bytes short of its Content-Length, then the client closes its side.
    let mut short = greet(json!(1), "x").wire(addr);
    let cut = short.len() - 10;
    short.truncate(cut);
    // A chunk size that is not hexadecimal.
    let mut bad_chunk = greet(json!(1), "x")
        .wire(addr)
        .split(|&b| b == b'\n')
        .take_while(|l| *l != b"\r")
        .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-length"))
        .flat_map(|l| [l, b"\n"].concat())
        .collect::<Vec<u8>>();
    bad_chunk.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n");
    for (what, wire) in [
        ("a truncated body", short),
        ("a malformed chunk", bad_chunk),
    ] {
        let answer = half_closed(addr, wire).await.answer(what);
        let body = answer.jsonrpc(what);
        assert_eq!(answer.status, 400, "{what}: {}", answer.excerpt());
        assert!(
            matches!(body["error"]["code"].as_i64(), Some(-32600 | -32700)),
            "{what}: {body}"
        );
        assert!(body.get("id").is_none(), "{what}: {body}");
        assert!(
            !body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("larger than"),
            "{what}: a small body is not too large: {body}"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_headers_and_many_requests() {
    let t = Target::start().await;
    let addr = t.addr();

    // Many small requests, each with 64 KiB of extra headers: all served.
    let pad = "p".repeat(8 * 1024);
    let answers: Vec<Answer> = futures::stream::iter((0..64).map(|i| {
        let mut req = greet(json!(i), "many");
        for h in 0..8 {
            req = req.set(&format!("x-pad-{h}"), pad.as_bytes());
        }
        let t = &t;
        async move { req.send_to_app(&t.app).await }
    }))
    .buffer_unordered(8)
    .collect()
    .await;
    assert_eq!(answers.len(), 64);
    for a in &answers {
        let id = a.jsonrpc("padded request")["id"].clone();
        assert_eq!(text_of(&a.result("padded request", &id)), "Hello, many!");
    }

    // An Mcp-Name of 64 KiB: compared like any other, matching or not.
    let long_name = "n".repeat(64 * 1024);
    let unknown = rpc(
        json!("long"),
        "tools/call",
        json!({ "name": long_name, "arguments": {} }),
    );
    unknown.send_to_app(&t.app).await.error(
        "a 64 KiB tool name, mirrored",
        200,
        -32602,
        Some(&json!("long")),
    );
    greet(json!("long"), "x")
        .set("mcp-name", long_name.as_bytes())
        .send_to_app(&t.app)
        .await
        .error(
            "a 64 KiB Mcp-Name, not mirrored",
            400,
            -32020,
            Some(&json!("long")),
        );

    // Past what the HTTP layer reads: one 1 MiB header, or hundreds of header lines.
    // Refused with 431 (or the connection closed), never served.
    let huge = greet(json!(1), "x").set("x-huge", "h".repeat(1024 * 1024));
    let many = (0..500).fold(greet(json!(1), "x"), |r, i| r.set(&format!("x-{i}"), "v"));
    for (what, req) in [("a 1 MiB header", huge), ("500 header lines", many)] {
        match req.send_tcp(addr).await {
            Tcp::Closed => {}
            Tcp::Answer(a) => assert_eq!(a.status, 431, "{what}: {}", a.excerpt()),
        }
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_task_ids_are_refused_without_a_lookup_or_an_echo() {
    let t = Target::start().await;
    let huge = "a".repeat(1_000_000);
    // A real task's id, padded: still not an id this server issues.
    let real_padded = format!("{}{}", t.waiting, "0".repeat(999_964));
    for (method, params) in [
        ("tasks/get", json!({ "taskId": huge })),
        ("tasks/cancel", json!({ "taskId": huge })),
        ("tasks/cancel", json!({ "taskId": real_padded })),
        ("tasks/get", json!({ "taskId": format!("{} ", t.done) })),
        ("tasks/get", json!({ "taskId": t.done.to_uppercase() })),
        (
            "tasks/update",
            json!({ "taskId": huge, "inputResponses": { "confirm_delete": { "action": "accept", "content": { "confirm": true } } } }),
        ),
    ] {
        // Mcp-Name is optional on tasks/*; a megabyte does not fit in a header anyway.
        let req = rpc(json!(method), method, params).unset("mcp-name");
        assert!(req.body.len() < BODY_LIMIT, "inside the body limit");
        let answer = req.send_to_app(&t.app).await;
        let error = answer.error(method, 200, -32602, Some(&json!(method)));
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("Invalid task id")),
            "{method}: {error}"
        );
        assert!(
            answer.body.len() < 4096,
            "{method}: the answer echoes the id ({} bytes)",
            answer.body.len()
        );
    }
    t.finish().await;
}
