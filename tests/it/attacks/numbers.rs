//! Numbers: huge and tiny ones are parse errors or plain numbers, in ids, arguments and
//! `_meta` alike.

use serde_json::json;

use super::{Target, raw};
use crate::harness::spec::{CC, PV, VERSION, tasks_meta, text_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_tiny_numbers_are_parse_errors_or_plain_numbers() {
    let t = Target::start().await;
    let hundred_digits = "9".repeat(100);
    let m = tasks_meta().to_string();
    let envelope = |id: &str, params: &str| {
        raw(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#
        ))
        .set("mcp-method", "tools/call")
        .set("mcp-name", "greet")
    };
    let greet_params = |extra: &str| {
        format!(r#"{{"name":"greet","arguments":{{"name":"n"{extra}}},"_meta":{m}}}"#)
    };

    // Ids: out of range is not JSON this server can read; anything fractional or beyond
    // 64 bits is not an id. Neither is echoed.
    for id in ["1e400", "-1e400", "1E+400"] {
        envelope(id, &greet_params(""))
            .send_to_app(&t.app)
            .await
            .error(&format!("id {id}"), 400, -32700, None);
    }
    for id in [
        "1e-400",
        "-1e-400",
        "1e2",
        "1.0",
        "-0",
        hundred_digits.as_str(),
        "18446744073709551616",
        "-9223372036854775809",
    ] {
        envelope(id, &greet_params(""))
            .send_to_app(&t.app)
            .await
            .error(&format!("id {id}"), 400, -32600, None);
    }

    // In arguments: out of range is a parse error; a tiny or long number is a number.
    envelope("2", &greet_params(r#","big":1e400"#))
        .send_to_app(&t.app)
        .await
        .error("1e400 in arguments", 400, -32700, None);
    for extra in [
        r#","tiny":1e-400"#.to_owned(),
        format!(r#","long":{hundred_digits}"#),
        format!(r#","neg":-{hundred_digits}.{hundred_digits}e-5"#),
    ] {
        let result = envelope("3", &greet_params(&extra))
            .send_to_app(&t.app)
            .await
            .result(&format!("arguments with {extra}"), &json!(3));
        assert_eq!(text_of(&result), "Hello, n!", "{result}");
    }
    // Where the schema wants a bounded integer, a 100-digit one is invalid params. (Not
    // 1e-400: that is 0.0, which JSON Schema counts as the integer 0, and would create
    // a task.)
    for seconds in [
        hundred_digits.as_str(),
        "1e400000000",
        "3600.5",
        "-1",
        "3601",
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"slow_compute","arguments":{{"seconds":{seconds}}},"_meta":{m}}}}}"#
        );
        let answer = raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "slow_compute")
            .send_to_app(&t.app)
            .await;
        if seconds.starts_with("1e4") {
            answer.error(&format!("seconds {seconds}"), 400, -32700, None);
        } else {
            answer.error(&format!("seconds {seconds}"), 200, -32602, Some(&json!(4)));
        }
    }

    // In _meta.
    for (what, meta_text, code, status) in [
        (
            "progressToken 1e400",
            format!(r#"{{"{PV}":"{VERSION}","{CC}":{{}},"progressToken":1e400}}"#),
            -32700,
            400,
        ),
        (
            "protocolVersion 1e400",
            format!(r#"{{"{PV}":1e400,"{CC}":{{}}}}"#),
            -32700,
            400,
        ),
        (
            "protocolVersion 100 digits",
            format!(r#"{{"{PV}":{hundred_digits},"{CC}":{{}}}}"#),
            -32602,
            400,
        ),
    ] {
        let params =
            format!(r#"{{"name":"greet","arguments":{{"name":"n"}},"_meta":{meta_text}}}"#);
        let id = (code != -32700).then(|| json!(5));
        envelope("5", &params)
            .send_to_app(&t.app)
            .await
            .error(what, status, code, id.as_ref());
    }
    for token in ["1e-400", hundred_digits.as_str()] {
        let params = format!(
            r#"{{"name":"greet","arguments":{{"name":"p"}},"_meta":{{"{PV}":"{VERSION}","{CC}":{{}},"progressToken":{token}}}}}"#
        );
        let result = envelope("6", &params)
            .send_to_app(&t.app)
            .await
            .result(&format!("progressToken {token}"), &json!(6));
        assert_eq!(text_of(&result), "Hello, p!", "{result}");
    }

    t.finish().await;
}
