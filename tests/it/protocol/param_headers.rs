//! SEP-2243 custom headers on the server: a tool's `x-mcp-header` parameters must arrive
//! as `Mcp-Param-*` headers that mirror the arguments; anything else is 400 with -32020
//! before the tool runs. Our own client mirrors them as the server expects.

use serde_json::{Value, json};

use super::assert_result;
use crate::harness::TestApp;
use crate::harness::http::Request;

fn call(id: i64, arguments: Value) -> Request {
    Request::rpc(
        json!(id),
        "tools/call",
        json!({ "name": "test_custom_headers", "arguments": arguments }),
    )
    .principal("alice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_param_headers_must_mirror_the_arguments() {
    let app = TestApp::start(0).await;
    let full = json!({ "region": "Hello", "priority": 42, "verbose": true, "query": "q" });
    let good = || {
        call(1, full.clone())
            .set("mcp-param-region", "=?base64?SGVsbG8=?=")
            .set("Mcp-Param-Priority", "42.0")
            .set("MCP-PARAM-VERBOSE", "true")
    };
    let result = assert_result(
        &good().send_to_app(&app).await,
        "headers that mirror the body",
        &json!(1),
    );
    assert_eq!(result["structuredContent"]["region"], "Hello", "{result}");

    // A literal value that only looks like the sentinel (no suffix) is compared as is.
    let literal = call(2, json!({ "region": "=?base64?SGVsbG8" }))
        .set("mcp-param-region", "=?base64?SGVsbG8");
    assert_result(
        &literal.send_to_app(&app).await,
        "a literal, not base64",
        &json!(2),
    );
    // No value and no header: nothing to mirror (null counts as no value: see the wire tests).
    let absent = call(3, json!({ "region": "eu" })).set("mcp-param-region", "eu");
    assert_result(&absent.send_to_app(&app).await, "absent values", &json!(3));

    let refused = [
        (
            "a value without its header",
            good().unset("mcp-param-priority"),
        ),
        (
            "a header that does not match",
            good().set("mcp-param-region", "Hellp"),
        ),
        (
            "an integer that differs",
            good().set("mcp-param-priority", "43"),
        ),
        (
            "a boolean in another case",
            good().set("mcp-param-verbose", "TRUE"),
        ),
        (
            "base64 without its padding",
            good().set("mcp-param-region", "=?base64?SGVsbG8?="),
        ),
        (
            "base64 with foreign characters",
            good().set("mcp-param-region", "=?base64?SGVs!!!bG8=?="),
        ),
        (
            "a raw non-ASCII byte",
            good().set("mcp-param-region", b"H\xc3\xa9llo"),
        ),
        (
            "a header for a call without arguments",
            Request::rpc(
                json!(1),
                "tools/call",
                json!({ "name": "test_custom_headers" }),
            )
            .principal("alice")
            .set("mcp-param-region", "eu"),
        ),
        (
            "the header twice",
            good().add("mcp-param-region", "=?base64?SGVsbG8=?="),
        ),
        (
            "a header without a value in the body",
            call(1, json!({ "region": "eu" }))
                .set("mcp-param-region", "eu")
                .set("mcp-param-verbose", "true"),
        ),
    ];
    for (what, request) in refused {
        let raw = request.send_to_app(&app).await;
        let e = raw.error(what, 400, -32020, Some(&json!(1)));
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("Mcp-Param") || m.contains("mcp-param")),
            "{what}: {e}"
        );
    }

    // Our client reads the annotations from tools/list and sends what the server checks.
    let client = app.client("alice");
    client.list_tools().await.expect("tools/list");
    let result = client
        .call_tool(
            "test_custom_headers",
            json!({ "region": " padded é ", "priority": -7, "verbose": false }),
        )
        .await
        .expect("the client's own headers are accepted");
    assert_eq!(result["structuredContent"]["priority"], -7, "{result}");
    app.stop().await;
}
