//! Garbage where input goes: `requestState` of every shape, and `inputResponses` for a
//! waiting task.

use serde_json::{Value, json};

use super::{Target, rpc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_state_garbage_of_every_shape_is_invalid_params_and_creates_nothing() {
    let t = Target::start().await;
    let alice = t.app.client("alice");
    // A genuine state for alice's test_tool_with_task, and one for another tool.
    let first = alice
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("round one");
    assert_eq!(first["resultType"], "input_required", "{first}");
    let state = first["requestState"].as_str().expect("a state").to_owned();
    let other_tool = alice
        .call_tool("test_streaming_elicitation", json!({}))
        .await
        .expect("another tool's round one");
    let other_state = other_tool["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let bobs_state = t
        .app
        .client("bob")
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("bob's round one")["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let answer = json!({ "user_name": { "action": "accept", "content": { "name": "mallory" } } });

    let (payload, tag) = state.rsplit_once('.').expect("payload.tag");
    let flipped_tag = {
        let mut t = tag.to_owned().into_bytes();
        t[0] = if t[0] == b'A' { b'B' } else { b'A' };
        String::from_utf8(t).expect("ASCII")
    };
    let states: Vec<(&str, Value)> = vec![
        ("a number", json!(1)),
        ("a float", json!(1.5)),
        ("true", json!(true)),
        ("an object", json!({ "v": 1 })),
        ("an array", json!([state])),
        ("empty", json!("")),
        ("the prefix only", json!("v1.")),
        ("no tag", json!(payload)),
        ("three dots", json!("v1...")),
        ("garbage", json!("v1.!!!.???")),
        ("another version", json!(state.replacen("v1.", "v2.", 1))),
        ("a flipped tag", json!(format!("{payload}.{flipped_tag}"))),
        ("a truncated tag", json!(&state[..state.len() - 2])),
        ("an appended byte", json!(format!("{state}A"))),
        ("a NUL", json!(format!("{state}\u{0}"))),
        ("non-ASCII", json!(format!("{state}\u{e9}"))),
        ("300 KiB", json!("A".repeat(300 * 1024))),
        ("another tool's", json!(other_state)),
        ("another principal's", json!(bobs_state)),
    ];
    for (what, request_state) in states {
        let answer_obj = rpc(
            json!(what),
            "tools/call",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "requestState": request_state,
                "inputResponses": answer,
            }),
        )
        .send_to_app(&t.app)
        .await;
        let error = answer_obj.error(
            &format!("requestState {what}"),
            200,
            -32602,
            Some(&json!(what)),
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("requestState")),
            "{what}: {error}"
        );
    }
    // A genuine state with answers of the wrong shape: refused, nothing created.
    for (what, responses) in [
        ("an array", json!([1])),
        ("a string", json!("x")),
        (
            "a declined answer with content",
            json!({ "user_name": { "action": "nope" } }),
        ),
        (
            "an answer against the schema",
            json!({ "user_name": { "action": "accept", "content": { "name": 5 } } }),
        ),
    ] {
        let answer_obj = rpc(
            json!(what),
            "tools/call",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "requestState": state,
                "inputResponses": responses,
            }),
        )
        .send_to_app(&t.app)
        .await;
        answer_obj.error(
            &format!("inputResponses {what}"),
            200,
            -32602,
            Some(&json!(what)),
        );
    }
    // The state is bound to its arguments.
    rpc(
        json!("args"),
        "tools/call",
        json!({
            "name": "test_tool_with_task",
            "arguments": { "extra": 1 },
            "requestState": state,
            "inputResponses": answer,
        }),
    )
    .send_to_app(&t.app)
    .await
    .error("changed arguments", 200, -32602, Some(&json!("args")));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_garbage_for_a_waiting_task_changes_nothing() {
    let t = Target::start().await;
    let update = |id: Value, task: &str, responses: Value| {
        rpc(
            id,
            "tasks/update",
            json!({ "taskId": task, "inputResponses": responses }),
        )
    };
    for (what, responses) in [
        ("an array", json!([])),
        ("a string", json!("x")),
        ("null", Value::Null),
        ("an answer that is a number", json!({ "confirm_delete": 5 })),
        (
            "an unknown action",
            json!({ "confirm_delete": { "action": "bogus" } }),
        ),
        (
            "content against the schema",
            json!({ "confirm_delete": { "action": "accept", "content": { "confirm": "yes" } } }),
        ),
        (
            "a NUL deep inside",
            json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true, "x": ["\u{0}"] } } }),
        ),
        (
            "a NUL in a key",
            json!({ "confirm_delete\u{0}": { "action": "decline" } }),
        ),
    ] {
        update(json!(what), &t.waiting, responses)
            .send_to_app(&t.app)
            .await
            .error(
                &format!("inputResponses {what}"),
                200,
                -32602,
                Some(&json!(what)),
            );
    }
    // Bob answering (or cancelling) Alice's task learns nothing and changes nothing.
    let valid = json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } });
    for (method, params) in [
        (
            "tasks/update",
            json!({ "taskId": t.waiting, "inputResponses": valid }),
        ),
        ("tasks/cancel", json!({ "taskId": t.waiting })),
        ("tasks/get", json!({ "taskId": t.done })),
    ] {
        let error = rpc(json!(method), method, params)
            .set("x-test-principal", "bob")
            .send_to_app(&t.app)
            .await
            .error(
                &format!("bob's {method}"),
                200,
                -32602,
                Some(&json!(method)),
            );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("not found")),
            "{method}: {error}"
        );
    }
    // Answers to keys the task never asked for are ignored, not stored.
    let ack = update(
        json!("unasked"),
        &t.waiting,
        json!({ "other": { "action": "accept", "content": {} } }),
    )
    .send_to_app(&t.app)
    .await
    .result("an answer nobody asked for", &json!("unasked"));
    assert_eq!(ack["resultType"], "complete", "{ack}");
    // A completed task takes no input.
    update(json!("done"), &t.done, valid.clone())
        .send_to_app(&t.app)
        .await
        .result("input for a completed task", &json!("done"));
    t.finish().await;
}
