//! The module's own test: a stack from the mcp-tasks image, a task created through it and
//! its result read back. Needs a container engine and the image (`deploy/check` builds it,
//! then runs this with `--ignored`); `MCP_TASKS_TC_IMAGE` / `MCP_TASKS_TC_POSTGRES` name
//! other images (`name:tag`).

use std::time::{Duration, Instant};

use mcp_tasks_client::Client;
use mcp_tasks_testcontainers::McpTasks;
use serde_json::{Value, json};

fn image(var: &str) -> Option<(String, String)> {
    let spec = std::env::var(var).ok()?;
    let (name, tag) = spec.rsplit_once(':')?;
    Some((name.to_owned(), tag.to_owned()))
}

#[tokio::test]
#[ignore = "needs a container engine and the mcp-tasks image (deploy/check runs it)"]
async fn a_task_created_through_the_stack_completes_with_its_result() {
    let mut stack = McpTasks::default().with_tools("conformance");
    if let Some((name, tag)) = image("MCP_TASKS_TC_IMAGE") {
        stack = stack.with_image(name, tag);
    }
    if let Some((name, tag)) = image("MCP_TASKS_TC_POSTGRES") {
        stack = stack.with_postgres_image(name, tag);
    }
    let stack = stack.start().await.expect("starting the stack");
    let client = Client::with_tasks(stack.url());

    let created = client
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1, "label": "tc" } }),
        )
        .await
        .expect("tools/call")
        .into_result()
        .expect("tools/call result");
    let task_id = created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task created: {created}"))
        .to_owned();

    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let task = client
            .send(json!(2), "tasks/get", json!({ "taskId": task_id }))
            .await
            .expect("tasks/get")
            .into_result()
            .expect("tasks/get result");
        if task["status"] != "working" {
            break task;
        }
        assert!(Instant::now() < deadline, "still working: {task}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    let text: Vec<&str> = done
        .pointer("/result/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect();
    assert_eq!(text, ["Computed tc in 1 s."], "{done}");
}
