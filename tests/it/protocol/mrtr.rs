//! MRTR: input gathered before the task exists, and forged, replayed or mismatched
//! `requestState` refused without creating anything.

use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::{Value, json};

use super::exchange_error;
use crate::harness::spec::text_of;
use crate::harness::{TestApp, status, task_id};

pub(super) fn user_name(name: Value) -> Value {
    json!({ "user_name": { "action": "accept", "content": { "name": name } } })
}

pub(super) fn round_two(state: &str, arguments: Value, responses: Value) -> Value {
    json!({
        "name": "test_tool_with_task",
        "arguments": arguments,
        "inputResponses": responses,
        "requestState": state,
    })
}

/// Round 1 of `test_tool_with_task`: the input request and the state to send back.
pub(super) async fn round_one(client: &Client) -> String {
    let r1 = client
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("round 1");
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    assert!(r1.get("taskId").is_none(), "{r1}");
    assert_eq!(
        r1["inputRequests"]["user_name"]["method"], "elicitation/create",
        "{r1}"
    );
    r1["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("requestState must be a string: {r1}"))
        .to_owned()
}

async fn refused(client: &Client, params: Value, what: &'static str) -> Value {
    let ex = client
        .send(json!(what), "tools/call", params)
        .await
        .expect("tools/call");
    exchange_error(&ex, what, 200, -32602, &json!(what))
}

fn flip_middle(token: &str) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    let mut at = chars.len() / 2;
    while !chars[at].is_ascii_alphanumeric() {
        at += 1;
    }
    chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_gathers_input_before_the_task_and_refuses_forged_state() {
    let app = TestApp::start(1).await;
    let (db, replica) = (&app.db, app.replica());
    let alice = replica.client("alice");
    let bob = replica.client("bob");

    // The happy path.
    let state = round_one(&alice).await;
    let created = alice
        .request(
            "tools/call",
            round_two(&state, json!({}), user_name(json!("Alice"))),
        )
        .await
        .expect("round 2");
    assert_eq!(created["resultType"], "task", "{created}");
    assert!(created.get("requestState").is_none(), "{created}");
    assert!(created.get("inputRequests").is_none(), "{created}");
    let id = task_id(&created);
    let done = alice
        .wait_terminal(&id, Duration::from_secs(30))
        .await
        .expect("terminal");
    assert_eq!(status(&done), "completed", "{done}");
    assert!(text_of(&done["result"]).contains("Alice"), "{done}");

    // Answers without a state answer nothing: the server asks again.
    let again = alice
        .request(
            "tools/call",
            json!({ "name": "test_tool_with_task", "arguments": {}, "inputResponses": user_name(json!("Alice")) }),
        )
        .await
        .expect("answers without state");
    assert_eq!(again["resultType"], "input_required", "{again}");

    let state = round_one(&alice).await;
    let tampered = flip_middle(&state);
    assert_ne!(tampered, state);
    let e = refused(
        &alice,
        round_two(&tampered, json!({}), user_name(json!("Alice"))),
        "tampered requestState",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let e = refused(
        &bob,
        round_two(&state, json!({}), user_name(json!("Bob"))),
        "requestState replayed by another principal",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let e = refused(
        &alice,
        round_two(&state, json!({ "extra": 1 }), user_name(json!("Alice"))),
        "requestState with changed arguments",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let other_tool = alice
        .call_tool("test_streaming_elicitation", json!({}))
        .await
        .expect("test_streaming_elicitation round 1");
    assert_eq!(other_tool["resultType"], "input_required", "{other_tool}");
    let other_state = other_tool["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let e = refused(
        &alice,
        round_two(&other_state, json!({}), user_name(json!("Alice"))),
        "requestState of another tool",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let e = refused(
        &alice,
        round_two(&state, json!({}), user_name(json!(5))),
        "answer that does not match the schema",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("user_name"),
        "{e}"
    );

    // None of the refused rounds created a task.
    let mut conn = db.sql().await;
    let tasks: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE tool = 'test_tool_with_task'")
            .fetch_one(&mut conn)
            .await
            .expect("count");
    assert_eq!(tasks, 1, "only the accepted round 2 creates a task");

    // Input the client cannot give, and capabilities it did not declare.
    let bare = Client::new(&replica.url, json!({})).header("x-test-principal", "alice");
    let ex = bare
        .send(
            json!(41),
            "tools/call",
            json!({ "name": "test_streaming_elicitation", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    let e = exchange_error(
        &ex,
        "elicitation without the capability",
        400,
        -32021,
        &json!(41),
    );
    assert_eq!(
        e["data"]["requiredCapabilities"]["elicitation"],
        json!({}),
        "{e}"
    );

    let ex = bare
        .send(
            json!(42),
            "tools/call",
            json!({ "name": "test_missing_capability", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    let e = exchange_error(&ex, "sampling required", 400, -32021, &json!(42));
    assert_eq!(
        e["data"]["requiredCapabilities"]["sampling"],
        json!({}),
        "{e}"
    );

    app.stop().await;
}
