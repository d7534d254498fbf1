//! Discovery and `tools/list`: complete, and the same from every replica every time.

use serde_json::json;

use super::{assert_error, assert_result};
use crate::harness::TestApp;
use crate::harness::http::{self, Request};
use crate::harness::spec::{SERVER_INFO, TASKS, VERSION};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_and_tools_list_are_complete_and_stable() {
    let app = TestApp::builder().replicas(2).start().await;
    let (one, two) = (&app.replicas[0], &app.replicas[1]);
    let http = http::client();

    let raw = Request::rpc(json!("d"), "server/discover", json!({}))
        .send(&http, &one.url)
        .await;
    let d = assert_result(&raw, "server/discover", &json!("d"));
    assert_eq!(d["resultType"], "complete", "{d}");
    assert_eq!(d["supportedVersions"], json!([VERSION]), "{d}");
    assert_eq!(d["capabilities"]["extensions"][TASKS], json!({}), "{d}");
    assert!(
        d["capabilities"].get("tasks").is_none(),
        "no legacy capabilities.tasks: {d}"
    );
    assert!(d["capabilities"]["tools"].is_object(), "{d}");
    assert!(d["ttlMs"].is_u64(), "ttlMs must be an integer >= 0: {d}");
    assert!(
        matches!(d["cacheScope"].as_str(), Some("public" | "private")),
        "{d}"
    );
    let info = &d["_meta"][SERVER_INFO];
    assert!(info["name"].as_str().is_some_and(|s| !s.is_empty()), "{d}");
    assert!(
        info["version"].as_str().is_some_and(|s| !s.is_empty()),
        "{d}"
    );

    let list_on = |url: String| {
        let http = http.clone();
        async move {
            let raw = Request::rpc(json!(1), "tools/list", json!({}))
                .send(&http, &url)
                .await;
            assert_result(&raw, "tools/list", &json!(1))
        }
    };
    let a = list_on(one.url.clone()).await;
    let b = list_on(one.url.clone()).await;
    let c = list_on(two.url.clone()).await;
    assert_eq!(a, b, "tools/list differs between two calls");
    assert_eq!(a, c, "tools/list differs between two replicas");
    assert_eq!(a["resultType"], "complete");
    assert!(a["ttlMs"].is_u64(), "{a}");
    assert!(
        matches!(a["cacheScope"].as_str(), Some("public" | "private")),
        "{a}"
    );
    let tools = a["tools"].as_array().expect("tools array");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "greet",
        "slow_compute",
        "failing_job",
        "protocol_error_job",
        "confirm_delete",
        "multi_input",
        "test_tool_with_task",
        "test_missing_capability",
        "test_streaming_elicitation",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(
            tool.get("execution").is_none(),
            "no tool-level task declaration on the 2026 wire: {tool}"
        );
    }

    let raw = Request::rpc(json!(2), "tools/list", json!({ "cursor": "x" }))
        .send(&http, &one.url)
        .await;
    let e = assert_error(
        &raw,
        "tools/list with a foreign cursor",
        200,
        -32602,
        Some(&json!(2)),
    );
    assert!(
        e["message"].as_str().unwrap_or_default().contains("cursor"),
        "{e}"
    );

    app.stop().await;
}
