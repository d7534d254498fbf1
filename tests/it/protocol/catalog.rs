//! Resources, prompts and completions: the same answers from every replica (pages whose
//! cursors any replica reads, reads, prompts, completions, MRTR rounds spread over
//! replicas), the not-found and invalid-params shapes, and capabilities advertised only
//! when some pack provides them.

use mcp_tasks_client::Client;
use serde_json::{Value, json};

use super::{assert_error, assert_result};
use crate::harness::TestApp;
use crate::harness::http::Request;

/// Every item of a list, page by page, each page asked of the next replica in turn: the
/// pages, and the items in order.
async fn pages(clients: &[Client], method: &str, key: &str) -> (Vec<Value>, Vec<Value>) {
    let (mut pages, mut items) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    for turn in 0.. {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let page = clients[turn % clients.len()]
            .request(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method} page {turn}: {e}"));
        assert_eq!(page["resultType"], "complete", "{page}");
        assert!(
            page["ttlMs"].is_u64() && page["cacheScope"] == "public",
            "{page}"
        );
        items.extend(page[key].as_array().expect("items").iter().cloned());
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        pages.push(page);
        if cursor.is_none() {
            break;
        }
    }
    (pages, items)
}

fn uris(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().expect("a string").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_pages_reads_renders_and_completes_alike() {
    let app = TestApp::builder()
        .replicas(2)
        .config(|c| c.list_page_size = 2)
        .start()
        .await;
    let both = [
        app.replicas[0].client("alice"),
        app.replicas[1].client("alice"),
    ];

    // Lists: two items a page, cursors from one replica read on the other, and the same
    // items (in the same order) however the pages are spread.
    for (method, key, at_least) in [
        ("tools/list", "tools", 3),
        ("prompts/list", "prompts", 3),
        ("resources/list", "resources", 2),
        ("resources/templates/list", "resourceTemplates", 1),
    ] {
        let (on_a, items_a) = pages(&both[..1], method, key).await;
        let (_, items_b) = pages(&both[1..], method, key).await;
        let (_, spread) = pages(&both, method, key).await;
        assert!(items_a.len() >= at_least, "{method}: {items_a:?}");
        assert_eq!(items_a, items_b, "{method}: the same list on both replicas");
        assert_eq!(items_a, spread, "{method}: pages spread over replicas");
        assert!(
            on_a.iter()
                .all(|p| p[key].as_array().is_some_and(|i| i.len() <= 2))
        );
        if items_a.len() > 2 {
            assert!(
                on_a.len() > 1 && on_a[0].get("nextCursor").is_some(),
                "{method}"
            );
        }
        assert!(on_a.last().is_some_and(|p| p.get("nextCursor").is_none()));
    }
    let (_, resources) = pages(&both[..1], "resources/list", "resources").await;
    assert!(uris(&resources, "uri").contains(&"test://static-text".to_owned()));

    // Reads, prompts and completions: byte-for-byte the same result from each replica.
    let asks = [
        ("resources/read", json!({ "uri": "test://static-text" })),
        ("resources/read", json!({ "uri": "test://static-binary" })),
        (
            "resources/read",
            json!({ "uri": "test://template/123/data" }),
        ),
        ("prompts/get", json!({ "name": "test_simple_prompt" })),
        (
            "prompts/get",
            json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "x1", "arg2": "y2" } }),
        ),
        ("prompts/get", json!({ "name": "test_prompt_with_image" })),
        (
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" },
                    "argument": { "name": "arg1", "value": "PA" } }),
        ),
        (
            "completion/complete",
            json!({ "ref": { "type": "ref/resource", "uri": "test://template/{id}/data" },
                    "argument": { "name": "id", "value": "" } }),
        ),
    ];
    let mut answers = Vec::new();
    for (method, params) in &asks {
        let from_a = both[0].request(method, params.clone()).await.expect(method);
        let from_b = both[1].request(method, params.clone()).await.expect(method);
        assert_eq!(from_a, from_b, "{method} {params}");
        answers.push(from_a);
    }
    assert_eq!(
        answers[0]["contents"][0]["text"],
        "This is the content of the static text resource."
    );
    assert!(answers[0]["ttlMs"].is_u64() && answers[0]["cacheScope"].is_string());
    assert_eq!(answers[1]["contents"][0]["mimeType"], "image/png");
    assert!(answers[1]["contents"][0]["blob"].is_string());
    let data: Value =
        serde_json::from_str(answers[2]["contents"][0]["text"].as_str().expect("text"))
            .expect("JSON text");
    assert_eq!(data["id"], "123");
    assert_eq!(answers[2]["contents"][0]["uri"], "test://template/123/data");
    assert_eq!(
        answers[4]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='x1', arg2='y2'"
    );
    assert_eq!(answers[5]["messages"][0]["content"]["type"], "image");
    assert_eq!(
        answers[6]["completion"]["values"],
        json!(["paris", "park", "party"])
    );
    assert_eq!(answers[6]["completion"]["hasMore"], false);
    assert_eq!(answers[7]["completion"]["total"], 3);

    // Not found and invalid params, the same on both replicas.
    let http = &app.http;
    for replica in &app.replicas {
        let missing = "test://nonexistent";
        let raw = Request::rpc(json!(1), "resources/read", json!({ "uri": missing }))
            .principal("alice")
            .send(http, &replica.url)
            .await;
        let e = assert_error(&raw, "unknown resource", 200, -32602, Some(&json!(1)));
        assert_eq!(e["data"]["uri"], missing, "{e}");
        for (what, method, params) in [
            ("unknown prompt", "prompts/get", json!({ "name": "nope" })),
            (
                "a required prompt argument missing",
                "prompts/get",
                json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "x" } }),
            ),
            (
                "a prompt argument that is not a string",
                "prompts/get",
                json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "x", "arg2": 2 } }),
            ),
            (
                "completion of an unknown prompt",
                "completion/complete",
                json!({ "ref": { "type": "ref/prompt", "name": "nope" }, "argument": { "name": "a", "value": "" } }),
            ),
            (
                "completion of an unknown reference type",
                "completion/complete",
                json!({ "ref": { "type": "ref/tool", "name": "greet" }, "argument": { "name": "a", "value": "" } }),
            ),
            (
                "a cursor never issued",
                "prompts/list",
                json!({ "cursor": "bm9wZToy" }),
            ),
            (
                "a cursor of another list",
                "resources/list",
                json!({ "cursor": answers_cursor(&app).await }),
            ),
        ] {
            let raw = Request::rpc(json!(2), method, params)
                .principal("alice")
                .send(http, &replica.url)
                .await;
            assert_error(&raw, what, 200, -32602, Some(&json!(2)));
        }
    }
    app.stop().await;
}

/// A cursor `tools/list` issued (two tools a page), to offer to another list.
async fn answers_cursor(app: &TestApp) -> String {
    let page = app.replicas[0]
        .client("alice")
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
    page["nextCursor"].as_str().expect("a next page").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_asks_for_input_on_one_replica_and_renders_on_another() {
    let app = TestApp::builder().replicas(2).start().await;
    let url = |i: usize| app.replicas[i].url.clone();
    let elicit =
        Client::new(url(0), json!({ "elicitation": {} })).header("x-test-principal", "alice");
    let other =
        Client::new(url(1), json!({ "elicitation": {} })).header("x-test-principal", "alice");
    let bob = Client::new(url(1), json!({ "elicitation": {} })).header("x-test-principal", "bob");
    let name = json!({ "name": "test_input_required_result_prompt" });

    let r1 = elicit
        .request("prompts/get", name.clone())
        .await
        .expect("round 1");
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    let key = r1["inputRequests"]
        .as_object()
        .expect("requests")
        .keys()
        .next()
        .cloned()
        .expect("a key");
    let state = r1["requestState"].as_str().expect("state").to_owned();
    let round_two = |state: &str| {
        json!({
            "name": "test_input_required_result_prompt",
            "inputResponses": { key.clone(): { "action": "accept", "content": { "context": "from B" } } },
            "requestState": state,
        })
    };
    let done = other
        .request("prompts/get", round_two(&state))
        .await
        .expect("round 2 elsewhere");
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(
        done["messages"][0]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("from B")),
        "{done}"
    );

    // Another caller's replay, and a state of a tool call, are refused.
    let replay = bob
        .send(json!(9), "prompts/get", round_two(&state))
        .await
        .expect("replay");
    super::exchange_error(
        &replay,
        "replayed by another principal",
        200,
        -32602,
        &json!(9),
    );
    let tool_round = elicit
        .call_tool("test_input_required_result_elicitation", json!({}))
        .await
        .expect("tool round 1");
    let tool_state = tool_round["requestState"].as_str().expect("state");
    let crossed = other
        .send(json!(10), "prompts/get", round_two(tool_state))
        .await
        .expect("crossed");
    super::exchange_error(&crossed, "a tools/call state", 200, -32602, &json!(10));

    // Without elicitation the prompt cannot ask: -32021, not a request it cannot answer.
    let none = Client::new(url(0), json!({})).header("x-test-principal", "alice");
    let refused = none
        .send(json!(11), "prompts/get", name)
        .await
        .expect("refused");
    let e = super::exchange_error(&refused, "no elicitation", 400, -32021, &json!(11));
    assert_eq!(
        e["data"]["requiredCapabilities"]["elicitation"],
        json!({}),
        "{e}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_are_advertised_only_when_provided() {
    let full = TestApp::builder().packs("demo,conformance").start().await;
    let caps = full.client("alice").discover().await.expect("discover")["capabilities"].clone();
    for cap in ["tools", "resources", "prompts", "completions"] {
        assert!(caps.get(cap).is_some(), "{cap} in {caps}");
    }
    full.stop().await;

    let demo = TestApp::builder().packs("demo").start().await;
    let caps = demo.client("alice").discover().await.expect("discover")["capabilities"].clone();
    assert!(caps.get("tools").is_some(), "{caps}");
    for cap in ["resources", "prompts", "completions"] {
        assert!(caps.get(cap).is_none(), "{cap} in {caps}");
    }
    for (i, method) in [
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
    ]
    .into_iter()
    .enumerate()
    {
        let id = json!(i);
        let raw = Request::rpc(id.clone(), method, json!({}))
            .principal("alice")
            .send_to_app(&demo)
            .await;
        assert_error(&raw, method, 404, -32601, Some(&id));
    }
    let raw = Request::rpc(json!(9), "tools/list", json!({}))
        .principal("alice")
        .send_to_app(&demo)
        .await;
    assert_result(&raw, "tools/list", &json!(9));
    demo.stop().await;
}
