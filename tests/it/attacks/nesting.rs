//! Nesting: refused exactly past the depth limit, wherever it is, and never counted
//! inside strings.

use serde_json::json;

use super::{MAX_DEPTH, Target, arrays, call_raw, greet_padded, objects, raw};
use crate::harness::spec::{CC, PV, VERSION, tasks_meta, text_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_is_refused_exactly_past_the_limit_and_never_counted_inside_strings() {
    let t = Target::start().await;
    let pad = MAX_DEPTH - 3;

    for (what, shape) in [
        ("arrays", arrays as fn(usize) -> String),
        ("objects", objects),
    ] {
        // Exactly at the limit: an ordinary call.
        let at = greet_padded(&shape(pad)).send_to_app(&t.app).await;
        let result = at.result(&format!("{what} nested {MAX_DEPTH} deep"), &json!(1));
        assert_eq!(text_of(&result), "Hello, deep!", "{result}");
        // One level more, or very many: a parse error with no id, before anything runs.
        for extra in [1, 2, 10_000] {
            let over = greet_padded(&shape(pad + extra)).send_to_app(&t.app).await;
            over.error(
                &format!("{what} nested {} deep", MAX_DEPTH + extra),
                400,
                -32700,
                None,
            );
        }
    }

    // Inside `_meta` and inside `inputResponses` (three levels down too): at the limit
    // an ordinary call, one level over a parse error.
    let meta_pad = |depth: usize| {
        format!(
            r#"{{"name":"greet","arguments":{{"name":"m"}},"_meta":{{"{PV}":"{VERSION}","{CC}":{{}},"x":{}}}}}"#,
            arrays(depth)
        )
    };
    let responses_pad = |depth: usize| {
        format!(
            r#"{{"name":"greet","arguments":{{"name":"m"}},"inputResponses":{{"k":{}}},"_meta":{}}}"#,
            objects(depth),
            tasks_meta()
        )
    };
    for (what, params) in [
        ("_meta", &meta_pad as &dyn Fn(usize) -> String),
        ("inputResponses", &responses_pad),
    ] {
        let at = call_raw("greet", &params(MAX_DEPTH - 3))
            .send_to_app(&t.app)
            .await;
        assert_eq!(
            text_of(&at.result(&format!("{what} nested 64 deep"), &json!(1))),
            "Hello, m!"
        );
        call_raw("greet", &params(MAX_DEPTH - 2))
            .send_to_app(&t.app)
            .await
            .error(&format!("{what} nested 65 deep"), 400, -32700, None);
    }
    // A notification that is too deep is still answered with a parse error: nothing
    // could tell that it had no id.
    raw(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{}}}"#,
        objects(MAX_DEPTH)
    ))
    .set("mcp-method", "notifications/x")
    .send_to_app(&t.app)
    .await
    .error("a notification nested 65 deep", 400, -32700, None);

    // Brackets inside strings are text, however many.
    for (what, name) in [
        ("brackets", "[".repeat(100_000)),
        ("braces", "{".repeat(100_000)),
        ("escaped quotes", format!("\\\"{}", "[{".repeat(50_000))),
        ("a trailing backslash", format!("{}\\\\", "[".repeat(1000))),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{{"name":"greet","arguments":{{"name":"{name}"}},"_meta":{}}}}}"#,
            tasks_meta()
        );
        let answer = raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "greet")
            .send_to_app(&t.app)
            .await;
        let result = answer.result(&format!("{what} inside a string"), &json!("s"));
        let decoded: String = serde_json::from_str(&format!("\"{name}\"")).expect("a JSON string");
        assert_eq!(text_of(&result), format!("Hello, {decoded}!"), "{what}");
    }

    // A string that ends in an escaped backslash really ends: nesting after it counts.
    let hidden = greet_padded(&format!(r#"["\\",{}]"#, arrays(MAX_DEPTH - 3)))
        .send_to_app(&t.app)
        .await;
    hidden.error("nesting after a string ending in \\\\", 400, -32700, None);
    // And a quote escaped inside a string does not end it.
    let quoted = greet_padded(&format!(r#"["\"{}"]"#, "[".repeat(500)))
        .send_to_app(&t.app)
        .await;
    quoted.result("brackets after an escaped quote", &json!(1));

    t.finish().await;
}
