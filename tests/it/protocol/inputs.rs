//! Inputs PostgreSQL or JSON numbers cannot carry as they are: NUL characters, and ids
//! beyond 64 bits.

use serde_json::json;

use super::assert_id;
use super::mrtr::{round_one, round_two, user_name};
use crate::harness::TestApp;
use crate::harness::http::{self, Request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_in_task_input_are_not_an_internal_error() {
    let app = TestApp::start(0).await;
    let replica = app.replica();
    let http = http::client();

    let state = round_one(&replica.client("alice")).await;
    for (what, params) in [
        (
            "failing_job with a NUL in an argument",
            json!({ "name": "failing_job", "arguments": { "note": "a\u{0}b" } }),
        ),
        (
            "slow_compute with a NUL in its label",
            json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": "a\u{0}b" } }),
        ),
        (
            "MRTR answer with a NUL",
            round_two(&state, json!({}), user_name(json!("a\u{0}b"))),
        ),
    ] {
        let raw = Request::rpc(json!(what), "tools/call", params)
            .principal("alice")
            .send(&http, &replica.url)
            .await;
        let body = raw.jsonrpc(what);
        assert_id(&body, &raw, what, Some(&json!(what)));
        let accepted = raw.status == 200 && body["result"]["resultType"] == "task";
        let refused = matches!(raw.status, 200 | 400) && body["error"]["code"] == -32602;
        assert!(
            accepted || refused,
            "{what}: a well-formed request must create the task or be refused with -32602, \
             not HTTP {} {body}",
            raw.status
        );
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_beyond_64_bits_are_echoed_exactly_or_refused() {
    let app = TestApp::start(0).await;
    let replica = app.replica();
    let http = http::client();
    for id in ["123456789012345678901234567890", "-9223372036854775809"] {
        let req = Request::rpc(json!("@@ID@@"), "server/discover", json!({}));
        let text = String::from_utf8(req.body.clone())
            .expect("UTF-8")
            .replace("\"@@ID@@\"", id);
        let raw = req.body(text).send(&http, &replica.url).await;
        let body = raw.jsonrpc(id);
        let echoed = raw.text().contains(&format!("\"id\":{id}"));
        let refused =
            raw.status == 400 && body["error"]["code"] == -32600 && body.get("id").is_none();
        assert!(
            echoed || refused,
            "id {id}: must be echoed exactly or refused (-32600, no id): HTTP {} {}",
            raw.status,
            raw.text()
        );
    }
    app.stop().await;
}
