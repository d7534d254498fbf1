//! The example binary as a user runs it: `custom-tools dev` (on a throwaway PostgreSQL of
//! its own, so no shared database is touched), driven over HTTP by the client library.

use std::process::Stdio;
use std::time::Duration;

use mcp_tasks_client::{Client, status_of};
use serde_json::{Value, json};

struct Dev {
    child: tokio::process::Child,
    url: String,
}

impl Dev {
    /// SIGTERM, as an operator stops it: `dev` then deletes its throwaway cluster (a
    /// SIGKILL would leave the cluster running).
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let exited = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        assert!(
            exited.is_ok_and(|s| s.is_ok_and(|s| s.success())),
            "custom-tools dev did not stop cleanly on SIGTERM"
        );
    }
}

/// `custom-tools dev` on a free port; returns once `/healthz` answers.
async fn start() -> Dev {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_custom-tools"))
        .args(["dev", "--listen", &format!("127.0.0.1:{port}")])
        .env_remove("DATABASE_URL")
        .env_remove("MCP_TASKS_TOOLS")
        .env_remove("MCP_TASKS_CONFIG")
        .env("MCP_TASKS_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting custom-tools dev");
    let health = format!("http://127.0.0.1:{port}/healthz");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while http_ok(&health).await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "custom-tools dev did not answer within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Dev {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

/// A bare HTTP/1.1 GET over TCP: the test needs nothing more to see the replica is up.
async fn http_ok(url: &str) -> Option<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/')?;
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    answer.starts_with("HTTP/1.1 200").then_some(())
}

async fn get(client: &Client, id: &str) -> Value {
    client.get_task(id).await.expect("tasks/get")
}

#[tokio::test]
async fn archive_files_progress_input_result_and_cancellation() {
    let dev = start().await;
    let client = Client::with_tasks(&dev.url);
    let tools = client.list_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["archive_files"], "only our tool: no built-in pack");

    let created = client
        .call_tool(
            "archive_files",
            json!({"folder": "/data", "files": 4, "ms_per_file": 300}),
        )
        .await
        .expect("tools/call");
    let id = created["taskId"].as_str().expect("a task").to_owned();

    // Progress while it scans, then the question.
    let mut messages = Vec::new();
    let asked = loop {
        let task = get(&client, &id).await;
        if let Some(m) = task["statusMessage"].as_str()
            && messages.last().is_none_or(|l: &String| l != m)
        {
            messages.push(m.to_owned());
        }
        if status_of(&task) == "input_required" {
            break task;
        }
        assert_eq!(status_of(&task), "working", "{task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        messages
            .iter()
            .any(|m| m.ends_with("/4: scanning report-2.pdf")),
        "progress per file: {messages:?}"
    );
    let request = &asked["inputRequests"]["delete_originals"];
    assert!(
        request["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Found 4 files")),
        "{asked}"
    );

    client
        .update_task(
            &id,
            json!({"delete_originals": {"action": "accept", "content": {"delete": true}}}),
        )
        .await
        .expect("tasks/update");
    let done = client
        .wait_terminal(&id, Duration::from_secs(60))
        .await
        .expect("finished");
    assert_eq!(status_of(&done), "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["archived"], 4, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["deleted"], true,
        "{done}"
    );

    // Cancelled mid-scan.
    let created = client
        .call_tool(
            "archive_files",
            json!({"folder": "/big", "files": 500, "ms_per_file": 100}),
        )
        .await
        .expect("tools/call");
    let id = created["taskId"].as_str().expect("a task").to_owned();
    client
        .poll_until(
            &id,
            Duration::from_secs(30),
            Duration::from_millis(50),
            |t| {
                t["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("scanning"))
            },
        )
        .await
        .expect("scanning");
    client.cancel_task(&id).await.expect("tasks/cancel");
    let done = client
        .wait_terminal(&id, Duration::from_secs(30))
        .await
        .expect("finished");
    assert_eq!(status_of(&done), "cancelled", "{done}");
    dev.stop().await;
}
