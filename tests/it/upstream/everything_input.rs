//! `@modelcontextprotocol/server-everything` asking for input through us: its
//! `trigger-elicitation-request` sends `elicitation/create` during the call (it is listed
//! only because we declare elicitation), and `simulate-research-query` with `ambiguous`
//! asks from within a task of its own (2025-11-25, delivered through `tasks/result`).
//! Each request becomes our task's `inputRequests`; the `tasks/update` answer goes back
//! to the upstream, whose result shows it. `trigger-sampling-request` asks for sampling,
//! which reaches only a client that declared it; any other gets no such request, and the
//! upstream hears that it cannot be answered.

use std::time::Duration;

use serde_json::{Value, json};

use mcp_tasks_client::Client;

use super::fastmcp_input::{asked, asked_for};
use super::{Fleet, Scratch, everything_argv, start_task, text_of, toml_list, wait_terminal};
use crate::harness::{Need, skip, status};

async fn setup(scratch: &Scratch) -> String {
    let argv = toml_list(&everything_argv("stdio").await);
    scratch.write(
        "config.toml",
        &format!(
            r#"
[[upstream]]
name = "everything"
command = {argv}
prefix = "everything_"
tools = ["trigger-elicitation-request", "simulate-research-query", "trigger-sampling-request"]
mode = "task-required"
idempotent = false
timeout_ms = 120000
"#
        ),
    )
}

#[tokio::test]
async fn everything_elicitation_during_a_call_and_in_its_own_task() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();

    // During the call: accept, with the one field the form requires.
    let id = start_task(&client, "everything_trigger-elicitation-request", json!({})).await;
    let (task, key) = asked(&client, &id).await;
    let schema = &task["inputRequests"][&key]["params"]["requestedSchema"];
    assert_eq!(schema["required"], json!(["name"]), "{task}");
    client
        .update_task(
            &id,
            json!({ key: {"action": "accept", "content": {"name": "Ada Lovelace"}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert!(
        text_of(&done["result"]).contains("Name: Ada Lovelace"),
        "{done}"
    );

    // Declined.
    let id = start_task(&client, "everything_trigger-elicitation-request", json!({})).await;
    let (_, key) = asked(&client, &id).await;
    client
        .update_task(&id, json!({ key: {"action": "decline"} }))
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert!(text_of(&done["result"]).contains("declined"), "{done}");

    // From within the upstream's own task: pick one of the interpretations it offers.
    let id = start_task(
        &client,
        "everything_simulate-research-query",
        json!({"topic": "python", "ambiguous": true}),
    )
    .await;
    let (task, key) = asked(&client, &id).await;
    let offered = &task["inputRequests"][&key]["params"]["requestedSchema"]["properties"]["interpretation"]
        ["oneOf"];
    let choice = offered[0]["const"]
        .as_str()
        .unwrap_or_else(|| panic!("no interpretation offered: {task}"))
        .to_owned();
    client
        .update_task(
            &id,
            json!({ key: {"action": "accept", "content": {"interpretation": choice}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    let report = text_of(&done["result"]);
    assert!(
        report.contains(&format!("**Clarification**: {choice}")),
        "the upstream's report shows the answer {choice:?}: {report}"
    );
    assert!(
        done["result"]["_meta"]
            .get("io.modelcontextprotocol/related-task")
            .is_none_or(Value::is_null)
    );
}

#[tokio::test]
async fn everything_sampling_reaches_only_a_client_that_declared_it() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let mut caps = mcp_tasks_client::tasks_capabilities();
    caps["sampling"] = json!({});
    let sampling = Client::new(fleet.replica.url(), caps);

    let id = start_task(
        &sampling,
        "everything_trigger-sampling-request",
        json!({"prompt": "a haiku", "maxTokens": 20}),
    )
    .await;
    let (task, key) = asked_for(&sampling, &id, "sampling/createMessage").await;
    let asked_text = task["inputRequests"][&key]["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(asked_text.contains("a haiku"), "{task}");
    sampling
        .update_task(
            &id,
            json!({ key: {"role": "assistant", "model": "test-model",
                          "content": {"type": "text", "text": "old pond, a frog"}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&sampling, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    let text = text_of(&done["result"]);
    assert!(
        text.contains("old pond, a frog") && text.contains("test-model"),
        "{done}"
    );

    // A client that did not declare sampling is never asked: the upstream is told no.
    let plain = fleet.client();
    let id = start_task(
        &plain,
        "everything_trigger-sampling-request",
        json!({"prompt": "a haiku"}),
    )
    .await;
    let done = wait_terminal(&plain, &id, Duration::from_secs(60)).await;
    assert_ne!(status(&done), "input_required", "{done}");
    let told = format!("{}", done);
    assert!(
        told.contains("did not declare"),
        "the upstream's error names the refusal: {done}"
    );
}
