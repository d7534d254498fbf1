//! README's client example: `cargo run -p mcp-tasks-client --example quickstart` beside
//! `mcp-tasks dev`. `tests/it/smoke.rs` runs it, and checks README shows it as it is here.

use std::time::Duration;

use mcp_tasks_client::{Client, ClientError};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let task = report(&Client::with_tasks("http://127.0.0.1:8080/mcp")).await?;
    let text = &task["result"]["content"][0]["text"];
    println!("{}: {text}", task["status"]);
    Ok(())
}

/// `generate_report` runs as a task, in a worker; it asks for an approval, which we give.
pub(crate) async fn report(client: &Client) -> Result<Value, ClientError> {
    let task = client.call_tool("generate_report", json!({})).await?;
    let id = task["taskId"].as_str().unwrap_or_default();
    let asks = |t: &Value| t["status"] == "input_required";
    let (wait, poll) = (Duration::from_secs(60), Duration::from_millis(500));
    client.poll_until(id, wait, poll, asks).await?;
    let yes = json!({ "approve_outline": { "action": "accept", "content": { "approved": true } } });
    client.update_task(id, yes).await?;
    client.wait_terminal(id, wait).await
}
