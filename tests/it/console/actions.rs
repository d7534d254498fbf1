//! The task page's actions and its live part: cancel a running task, answer an input
//! request through the form built from its schema (the same round `tasks/update` makes),
//! follow a task over SSE, and bad input (and input requests no form can express) that
//! gets an error page, never a panic.

use std::time::Duration;

use mcp_tasks_store::{InputOutcome, TaskId};
use serde_json::{Value, json};

use super::{Console, console_on, text_of};
use crate::harness::fixtures::{create, found, http_owner, leased, new_task, task_in_status};
use crate::harness::http::sse::SseStream;
use crate::harness::{TestApp, eventually, status};

async fn status_of(app: &TestApp, id: &str) -> String {
    let task = found(
        &app.db.store,
        &http_owner("alice"),
        TaskId::parse(id).expect("id"),
    )
    .await;
    task.status.as_str().to_owned()
}

#[tokio::test]
async fn the_cancel_button_stops_a_running_task() {
    let app = TestApp::builder()
        .workers(1)
        .config(console_on)
        .start()
        .await;
    let api = app.client("alice");
    let id = task_in_status(&api, "slow_compute", json!({ "seconds": 60 }), "working").await;
    // Wait until a worker holds it, so the cancel goes the cooperative way.
    eventually(
        Duration::from_secs(10),
        "a worker holding the task",
        || async {
            let task = found(
                &app.db.store,
                &http_owner("alice"),
                TaskId::parse(&id).expect("id"),
            )
            .await;
            task.lease_owner.map(|_| ())
        },
    )
    .await;

    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.task(&id).await;
    assert!(page.has(r#"id="task-cancel""#), "{}", page.body);
    let done = alice
        .post(
            &format!("/console/tasks/{id}/cancel"),
            &[("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(done.status, 303, "{done:?}");
    let task = api
        .wait_terminal(&id, Duration::from_secs(15))
        .await
        .expect("the task ends");
    assert_eq!(status(&task), "cancelled", "{task}");
    let after = alice.task(&id).await;
    assert_eq!(
        text_of(&after.body, "task-status").as_deref(),
        Some("cancelled")
    );
    assert!(
        !after.has(r#"id="task-cancel""#),
        "no cancel button once final"
    );
    app.stop().await;
}

#[tokio::test]
async fn answering_the_form_completes_the_input_round_like_tasks_update() {
    let app = TestApp::builder()
        .workers(1)
        .config(console_on)
        .start()
        .await;
    let api = app.client("alice");
    let id = task_in_status(
        &api,
        "confirm_delete",
        json!({ "filename": "notes.txt" }),
        "input_required",
    )
    .await;

    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.task(&id).await;
    assert_eq!(
        text_of(&page.body, "task-status").as_deref(),
        Some("input_required")
    );
    assert!(
        page.has(r#"class="task-answer""#) && page.has(r#"data-key="confirm_delete""#),
        "{}",
        page.body
    );
    assert!(
        page.has(r#"type="checkbox" name="field.confirm""#),
        "{}",
        page.body
    );
    for action in ["accept", "decline", "cancel"] {
        assert!(
            page.has(&format!(r#"name="action" value="{action}""#)),
            "{action}"
        );
    }
    assert!(page.has("Delete notes.txt?"));

    let answer = format!("/console/tasks/{id}/answer");
    let csrf = page.csrf();
    let done = alice
        .post(
            &answer,
            &[
                ("csrf", &csrf),
                ("key", "confirm_delete"),
                ("action", "accept"),
                ("field.confirm", "true"),
            ],
        )
        .await;
    assert_eq!(
        (done.status, done.location()),
        (303, format!("/console/tasks/{id}").as_str()),
        "{done:?}"
    );
    let task = api
        .wait_terminal(&id, Duration::from_secs(15))
        .await
        .expect("the task ends");
    assert_eq!(status(&task), "completed", "{task}");
    assert_eq!(
        task.pointer("/result/content/0/text"),
        Some(&json!("Deleted notes.txt."))
    );
    // Stored as tasks/update stores the same answer.
    let stored = found(
        &app.db.store,
        &http_owner("alice"),
        TaskId::parse(&id).expect("id"),
    )
    .await;
    assert_eq!(
        stored.input_responses.get("confirm_delete"),
        Some(&json!({ "action": "accept", "content": { "confirm": true } }))
    );

    let after = alice.task(&id).await;
    assert_eq!(
        text_of(&after.body, "task-status").as_deref(),
        Some("completed")
    );
    assert!(after.has("Deleted notes.txt."), "the owner sees the result");
    assert!(
        !after.has(r#"class="task-answer""#),
        "nothing left to answer"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_live_stream_follows_the_task_to_its_end() {
    let app = TestApp::builder()
        .workers(1)
        .config(console_on)
        .start()
        .await;
    let api = app.client("alice");
    let id = task_in_status(
        &api,
        "confirm_delete",
        json!({ "filename": "a" }),
        "input_required",
    )
    .await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let mut events = SseStream::new(alice.send_get(&format!("/console/tasks/{id}/events")).await);
    assert_eq!(events.status, 200);
    let mut seen: Vec<Value> = Vec::new();
    let first = next_data(&mut events)
        .await
        .expect("the current state first");
    assert_eq!(first["status"], "input_required", "{first}");
    assert!(
        first["inputs"]
            .as_str()
            .unwrap_or_default()
            .contains("task-answer")
    );
    assert_eq!(first["keys"], "confirm_delete");
    // What the snapshot does not carry is read again for the page: the attempt the input
    // round belongs to, and the timeline with the claim that ran it.
    assert_eq!(first["attempt"], "1 of 3", "{first}");
    let timeline = first["timeline"].as_str().unwrap_or_default();
    assert!(
        timeline.starts_with(r#"<ol id="task-timeline">"#)
            && timeline.contains(r#"data-kind="claimed""#),
        "{timeline}"
    );

    api.update_task(
        &id,
        json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } }),
    )
    .await
    .expect("tasks/update");
    while let Some(data) = next_data(&mut events).await {
        seen.push(data);
    }
    let last = seen.last().expect("updates after the answer");
    assert_eq!(last["status"], "completed", "{seen:?}");
    assert_eq!(last["terminal"], true);
    assert!(
        last["timeline"]
            .as_str()
            .unwrap_or_default()
            .contains(r#"data-kind="finished""#),
        "the timeline ends with the finish: {last}"
    );
    assert!(
        last["result"]
            .as_str()
            .unwrap_or_default()
            .contains("Deleted a."),
        "{last}"
    );
    app.stop().await;
}

async fn next_data(events: &mut SseStream) -> Option<Value> {
    loop {
        let event = events.next_event(Duration::from_secs(15)).await?;
        if let Some(data) = event.data() {
            return Some(serde_json::from_str(&data).expect("JSON data"));
        }
    }
}

#[tokio::test]
async fn bad_input_gets_an_error_page_and_changes_nothing() {
    let app = TestApp::builder()
        .workers(1)
        .config(console_on)
        .start()
        .await;
    let api = app.client("alice");
    let id = task_in_status(&api, "multi_input", json!({}), "input_required").await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.task(&id).await;
    let csrf = page.csrf();
    let answer = format!("/console/tasks/{id}/answer");

    // Larger than any form: 413 before anything is read into a task.
    let huge = "x".repeat(100 * 1024);
    let refused = alice
        .post(
            &answer,
            &[("csrf", &csrf), ("key", "name"), ("field.name", &huge)],
        )
        .await;
    assert_eq!(refused.status, 413, "{refused:?}");
    // An unknown action, a missing key, NUL in an answer.
    let unknown = alice
        .post(
            &answer,
            &[("csrf", &csrf), ("key", "name"), ("action", "maybe")],
        )
        .await;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    assert!(unknown.has("unknown action"));
    let no_key = alice
        .post(&answer, &[("csrf", &csrf), ("action", "accept")])
        .await;
    assert_eq!(no_key.status, 400, "{no_key:?}");
    let nul = alice
        .post(
            &answer,
            &[
                ("csrf", &csrf),
                ("key", "name"),
                ("action", "accept"),
                ("field.name", "a\0b"),
            ],
        )
        .await;
    assert_eq!(nul.status, 400, "{nul:?}");
    assert!(nul.has("NUL"), "{}", nul.body);
    // Not form-encoded at all, and an answer to a key nothing asked for (ignored, as by
    // tasks/update).
    let garbage = alice
        .post_with(&answer, &[("csrf", &csrf), ("key", "%%%")], &[])
        .await;
    assert!(
        garbage.status == 303 || garbage.status == 400,
        "{garbage:?}"
    );
    assert_eq!(status_of(&app, &id).await, "input_required");

    // An answer the schema refuses (a required name left empty) gets the API's message.
    let empty = alice
        .post(
            &answer,
            &[
                ("csrf", &csrf),
                ("key", "name"),
                ("action", "accept"),
                ("field.name", ""),
            ],
        )
        .await;
    assert_eq!(empty.status, 400, "{empty:?}");
    assert!(empty.has("Invalid input response for"), "{}", empty.body);
    assert_eq!(status_of(&app, &id).await, "input_required");

    // Both requests answered, one post each: the round completes.
    let first = alice
        .post(
            &answer,
            &[
                ("csrf", &csrf),
                ("key", "name"),
                ("action", "accept"),
                ("field.name", "Ada"),
            ],
        )
        .await;
    assert_eq!(first.status, 303, "{first:?}");
    let page = alice.task(&id).await;
    assert!(
        !page.has(r#"data-key="name""#) && page.has(r#"data-key="confirm""#),
        "{}",
        page.body
    );
    let second = alice
        .post(
            &answer,
            &[
                ("csrf", &csrf),
                ("key", "confirm"),
                ("action", "accept"),
                ("field.confirm", "true"),
            ],
        )
        .await;
    assert_eq!(second.status, 303, "{second:?}");
    let task = api
        .wait_terminal(&id, Duration::from_secs(15))
        .await
        .expect("the task ends");
    assert_eq!(
        task.pointer("/result/content/0/text"),
        Some(&json!("Got name \"Ada\"; confirmed: true.")),
        "{task}"
    );
    app.stop().await;
}

#[tokio::test]
async fn input_requests_a_form_cannot_express_are_shown_and_only_declined() {
    let app = TestApp::builder().config(console_on).start().await;
    let store = &app.db.store;
    let owner = http_owner("alice");
    let task = create(store, &owner, new_task("confirm_delete", json!({}))).await;
    let lease = leased(store, task.id).await;
    let mut requests = serde_json::Map::new();
    for (key, request) in [
        (
            "nested",
            json!({ "method": "elicitation/create", "params": { "message": "m", "requestedSchema": { "type": "object", "properties": { "list": { "type": "array" } } } } }),
        ),
        (
            "broken",
            json!({ "method": "elicitation/create", "params": { "message": "m", "requestedSchema": { "properties": 7, "required": "x" } } }),
        ),
        (
            "sampling",
            json!({ "method": "sampling/createMessage", "params": { "messages": [] } }),
        ),
    ] {
        requests.insert(key.into(), request);
    }
    let outcome = store
        .worker()
        .request_input(&lease, &requests, Some("waiting"), None)
        .await
        .expect("request_input");
    assert_eq!(outcome, InputOutcome::Applied);

    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let id = task.id.to_string();
    let page = alice.task(&id).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        page.body.matches(r#"class="task-answer""#).count(),
        3,
        "{}",
        page.body
    );
    assert_eq!(
        page.body.matches("input-unsupported").count(),
        3,
        "{}",
        page.body
    );
    assert!(
        !page.has(r#"value="accept""#),
        "nothing to accept with a form"
    );

    let answer = format!("/console/tasks/{id}/answer");
    let csrf = page.csrf();
    for key in ["nested", "broken", "sampling"] {
        let refused = alice
            .post(
                &answer,
                &[("csrf", &csrf), ("key", key), ("action", "accept")],
            )
            .await;
        assert_eq!(refused.status, 400, "{key}: {refused:?}");
    }
    let declined = alice
        .post(
            &answer,
            &[("csrf", &csrf), ("key", "broken"), ("action", "decline")],
        )
        .await;
    assert_eq!(declined.status, 303, "{declined:?}");
    let after = found(store, &owner, task.id).await;
    assert_eq!(
        after.input_responses.get("broken"),
        Some(&json!({ "action": "decline" }))
    );
    app.stop().await;
}

#[tokio::test]
async fn a_multi_select_is_answered_with_the_boxes_ticked() {
    let app = TestApp::builder().config(console_on).start().await;
    let store = &app.db.store;
    let owner = http_owner("alice");
    let task = create(store, &owner, new_task("confirm_delete", json!({}))).await;
    let lease = leased(store, task.id).await;
    let mut requests = serde_json::Map::new();
    requests.insert(
        "colors".into(),
        json!({ "method": "elicitation/create", "params": { "message": "m", "requestedSchema": {
            "type": "object",
            "properties": { "colors": { "type": "array", "title": "Colours", "minItems": 1,
                "items": { "anyOf": [{ "const": "#f00", "title": "Red" }, { "const": "#0f0", "title": "Green" }, { "const": "#00f", "title": "Blue" }] } } },
            "required": ["colors"]
        } } }),
    );
    let outcome = store
        .worker()
        .request_input(&lease, &requests, Some("waiting"), None)
        .await
        .expect("request_input");
    assert_eq!(outcome, InputOutcome::Applied);

    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let id = task.id.to_string();
    let page = alice.task(&id).await;
    assert!(!page.has("input-unsupported"), "{}", page.body);
    assert_eq!(
        page.body
            .matches(r#"type="checkbox" name="option."#)
            .count(),
        3,
        "{}",
        page.body
    );
    let answer = format!("/console/tasks/{id}/answer");
    let csrf = page.csrf();
    let none = alice
        .post(
            &answer,
            &[("csrf", &csrf), ("key", "colors"), ("action", "accept")],
        )
        .await;
    assert_eq!(none.status, 400, "{none:?}");
    assert!(none.has("choose at least 1"), "{}", none.body);
    let ticked = alice
        .post(
            &answer,
            &[
                ("csrf", &csrf),
                ("key", "colors"),
                ("action", "accept"),
                ("option.0.colors", "true"),
                ("option.2.colors", "true"),
            ],
        )
        .await;
    assert_eq!(ticked.status, 303, "{ticked:?}");
    let after = found(store, &owner, task.id).await;
    assert_eq!(
        after.input_responses.get("colors"),
        Some(&json!({ "action": "accept", "content": { "colors": ["#f00", "#00f"] } }))
    );
    app.stop().await;
}
