//! Resources, prompts and completions in a 2025-era session: advertised by `initialize`
//! only when some pack provides them, the same answers from every replica, and input a
//! session cannot give refused.

use serde_json::{Value, json};

use super::{Session, answer, initialize_body, post};
use crate::harness::TestApp;

async fn initialize_capabilities(url: &str) -> Value {
    let init = answer(
        post(
            &super::http(),
            url,
            &[("x-test-principal", "alice")],
            &initialize_body("2025-06-18", json!({})),
        )
        .await,
    )
    .await;
    init.body["result"]["capabilities"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_read_the_catalog_on_any_replica() {
    let app = TestApp::builder().replicas(2).start().await;
    let caps = initialize_capabilities(app.url()).await;
    for cap in ["tools", "resources", "prompts", "completions"] {
        assert!(caps.get(cap).is_some(), "{cap} in {caps}");
    }
    let a = Session::open(&app.replicas[0].url, "2025-11-25", json!({}), "alice").await;
    let b = a.at(&app.replicas[1].url);
    let asks = [
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        ("prompts/list", json!({})),
        ("resources/read", json!({ "uri": "test://template/7/data" })),
        (
            "prompts/get",
            json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "a", "arg2": "b" } }),
        ),
        (
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" },
                    "argument": { "name": "arg2", "value": "wo" } }),
        ),
    ];
    for (i, (method, params)) in asks.into_iter().enumerate() {
        let id = i64::try_from(i).expect("small");
        let on_a = a.result(id, method, params.clone()).await;
        let on_b = b.result(id, method, params).await;
        assert_eq!(on_a, on_b, "{method}");
        // The revision has no resultType.
        assert!(on_a.get("resultType").is_none(), "{method}: {on_a}");
        if method == "completion/complete" {
            assert_eq!(
                on_a["completion"]["values"],
                json!(["world", "work", "wonder"]),
                "{on_a}"
            );
        }
    }
    let e = b
        .error(
            20,
            "resources/read",
            json!({ "uri": "test://missing" }),
            200,
        )
        .await;
    assert_eq!(
        (e["code"].as_i64(), &e["data"]["uri"]),
        (Some(-32602), &json!("test://missing"))
    );
    // Input nobody declared is never asked for; and MRTR is not in this revision, so a
    // prompt that needs input first is an error even for a client that could answer.
    let prompt = json!({ "name": "test_input_required_result_prompt" });
    let e = a.error(21, "prompts/get", prompt.clone(), 200).await;
    assert_eq!(e["code"], -32021, "{e}");
    let eliciting = Session::open(
        &app.replicas[1].url,
        "2025-06-18",
        json!({ "elicitation": {} }),
        "alice",
    )
    .await;
    let e = eliciting.error(22, "prompts/get", prompt, 200).await;
    assert_eq!(e["code"], -32600, "{e}");
    app.stop().await;

    let demo = TestApp::builder().packs("demo").start().await;
    let caps = initialize_capabilities(demo.url()).await;
    assert!(caps.get("tools").is_some(), "{caps}");
    for cap in ["resources", "prompts", "completions"] {
        assert!(caps.get(cap).is_none(), "{cap} in {caps}");
    }
    demo.stop().await;
}
