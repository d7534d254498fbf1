//! Input for clients without the Tasks extension, and input kinds a client must declare:
//! a task-optional tool that asks for input runs through MRTR on `tools/call` (rounds on
//! different replicas), and a tool that may ask for a kind of input the client did not
//! declare is refused with -32021 before any task exists.

use mcp_tasks_client::Client;
use serde_json::json;

use super::{exchange_error, exchange_result};
use crate::harness::TestApp;

async fn tasks_of(app: &TestApp, tool: &str) -> i64 {
    let mut conn = app.db.sql().await;
    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE tool = $1")
        .bind(tool)
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_report_completes_through_mrtr_without_the_tasks_extension() {
    let app = TestApp::builder()
        .packs("demo,conformance")
        .replicas(2)
        .workers(1)
        .start()
        .await;
    let caps = json!({ "elicitation": {} });
    let on = |i: usize| {
        Client::new(&app.replicas[i].url, caps.clone()).header("x-test-principal", "alice")
    };
    let (a, b) = (on(0), on(1));

    // Round 1 on replica A: the task runs on the worker until it needs the approval,
    // which comes back as an MRTR input request, not as a task.
    let ex = a
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "generate_report", "arguments": { "size": "medium" } }),
        )
        .await
        .expect("round 1");
    let r1 = exchange_result(ex, "round 1");
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    assert!(r1.get("taskId").is_none(), "{r1}");
    let request = &r1["inputRequests"]["approve_outline"];
    assert_eq!(request["method"], "elicitation/create", "{r1}");
    let state = r1["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();

    // Round 2 on replica B: the answer resumes the same task, and the call waits for it.
    let ex = b
        .send(
            json!(2),
            "tools/call",
            json!({
                "name": "generate_report",
                "arguments": { "size": "medium" },
                "inputResponses": { "approve_outline": { "action": "accept", "content": { "approved": true } } },
                "requestState": state,
            }),
        )
        .await
        .expect("round 2");
    let done = exchange_result(ex, "round 2");
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["structuredContent"]["approved"], true, "{done}");
    assert_eq!(done["structuredContent"]["size"], "medium", "{done}");
    assert_eq!(
        tasks_of(&app, "generate_report").await,
        1,
        "one task ran both rounds"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_answer_is_refused_before_any_task() {
    let app = TestApp::builder()
        .packs("demo,conformance")
        .workers(1)
        .start()
        .await;
    let url = &app.replica().url;
    for (i, (caps, why)) in [
        (json!({}), "no capability at all"),
        (json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } }), "tasks but no elicitation"),
        (json!({ "elicitation": { "url": {} }, "extensions": { "io.modelcontextprotocol/tasks": {} } }), "URL elicitation only"),
    ]
    .into_iter()
    .enumerate()
    {
        let client = Client::new(url, caps).header("x-test-principal", "alice");
        for (tool, arguments) in [
            ("generate_report", json!({})),
            ("confirm_delete", json!({ "filename": "f" })),
        ] {
            let id = json!(format!("{tool}-{i}"));
            let ex = client
                .send(id.clone(), "tools/call", json!({ "name": tool, "arguments": arguments }))
                .await
                .expect("tools/call");
            let what = format!("{tool}: {why}");
            let e = exchange_error(&ex, &what, 400, -32021, &id);
            assert_eq!(
                e["data"]["requiredCapabilities"],
                json!({ "elicitation": {} }),
                "{what}: {e}"
            );
        }
    }
    assert_eq!(tasks_of(&app, "generate_report").await, 0);
    assert_eq!(tasks_of(&app, "confirm_delete").await, 0);

    // Declaring the kinds asked for is enough; a tool that asks for sampling needs it.
    let form = Client::new(url, json!({ "elicitation": { "form": {} } }))
        .header("x-test-principal", "alice");
    let r1 = form
        .call_tool("test_input_required_result_elicitation", json!({}))
        .await
        .expect("form elicitation declared");
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    let ex = form
        .send(
            json!("s"),
            "tools/call",
            json!({ "name": "test_input_required_result_sampling", "arguments": {} }),
        )
        .await
        .expect("sampling");
    let e = exchange_error(&ex, "sampling not declared", 400, -32021, &json!("s"));
    assert_eq!(
        e["data"]["requiredCapabilities"],
        json!({ "sampling": {} }),
        "{e}"
    );
    let ex = form
        .send(
            json!("m"),
            "tools/call",
            json!({ "name": "test_input_required_result_multiple_inputs", "arguments": {} }),
        )
        .await
        .expect("several kinds");
    let e = exchange_error(
        &ex,
        "sampling and roots not declared",
        400,
        -32021,
        &json!("m"),
    );
    assert_eq!(
        e["data"]["requiredCapabilities"],
        json!({ "sampling": {}, "roots": {} }),
        "{e}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_answered_one_round_at_a_time_without_the_tasks_extension() {
    let app = TestApp::builder().replicas(2).workers(1).start().await;
    let on = |i: usize| {
        Client::new(&app.replicas[i].url, json!({ "elicitation": {} }))
            .header("x-test-principal", "alice")
    };
    let round = |state: Option<&str>, responses: serde_json::Value| {
        let mut params =
            json!({ "name": "multi_input", "arguments": {}, "inputResponses": responses });
        if let Some(state) = state {
            params["requestState"] = json!(state);
        }
        params
    };
    let r1 = on(0)
        .request("tools/call", round(None, json!({})))
        .await
        .expect("round 1");
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    let mut keys: Vec<&String> = r1["inputRequests"]
        .as_object()
        .expect("requests")
        .keys()
        .collect();
    keys.sort();
    assert_eq!(keys, ["confirm", "name"], "{r1}");

    // Only one answered: the other is asked again, under a new state.
    let r2 = on(1)
        .request(
            "tools/call",
            round(
                r1["requestState"].as_str(),
                json!({ "name": { "action": "accept", "content": { "name": "Ada" } } }),
            ),
        )
        .await
        .expect("round 2");
    assert_eq!(r2["resultType"], "input_required", "{r2}");
    let left: Vec<&String> = r2["inputRequests"]
        .as_object()
        .expect("requests")
        .keys()
        .collect();
    assert_eq!(left, ["confirm"], "{r2}");

    let done = on(0)
        .request(
            "tools/call",
            round(
                r2["requestState"].as_str(),
                json!({ "confirm": { "action": "accept", "content": { "confirm": true } } }),
            ),
        )
        .await
        .expect("round 3");
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(
        crate::harness::spec::text_of(&done).contains("Ada"),
        "{done}"
    );
    assert_eq!(tasks_of(&app, "multi_input").await, 1);
    app.stop().await;
}
