//! `@modelcontextprotocol/server-everything` behind us, over stdio and over its
//! Streamable HTTP mode: its tools listed with the prefix, `get-sum` answered from the
//! replica, `trigger-long-running-operation` as a task whose status follows the upstream's
//! progress, completing with the upstream's text, and cancelled through `tasks/cancel`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Fleet, Scratch, everything_argv, start_task, text_of, toml_list, wait_terminal};
use crate::harness::procs::{self, Proc};
use crate::harness::{Need, TestDb, skip, status};

fn config(transport: &str) -> String {
    format!(
        r#"
[[upstream]]
name = "everything"
{transport}
prefix = "everything_"
tools = ["get-sum", "echo", "trigger-long-running-operation", "simulate-research-query"]
mode = "task-optional"
idempotent = true
timeout_ms = 60000
[upstream.tool."get-sum"]
mode = "sync-only"
[upstream.tool."trigger-long-running-operation"]
mode = "task-required"
"#
    )
}

async fn exercise(fleet: &Fleet) {
    let client = fleet.client();
    let tools = client.list_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "everything_echo",
            "everything_get-sum",
            "everything_simulate-research-query",
            "everything_trigger-long-running-operation"
        ],
        "only the listed tools, prefixed, in a stable order"
    );
    let long = tools
        .iter()
        .find(|t| t["name"] == "everything_trigger-long-running-operation")
        .expect("listed");
    // The upstream's descriptor survives: title, schema and annotations.
    assert_eq!(
        long["title"], "Trigger Long Running Operation Tool",
        "{long}"
    );
    assert_eq!(long["annotations"]["readOnlyHint"], true, "{long}");
    assert!(
        long["inputSchema"]["properties"]["steps"].is_object(),
        "{long}"
    );

    // Sync-only: answered by the replica, no task.
    let sum = client
        .call_tool("everything_get-sum", json!({"a": 2, "b": 3}))
        .await
        .expect("get-sum");
    assert!(text_of(&sum).contains('5'), "{sum}");
    assert!(sum.get("taskId").is_none(), "{sum}");

    // A task-optional tool for a client without the extension: the result, waited for.
    let echo = fleet
        .plain_client()
        .call_tool("everything_echo", json!({"message": "hello upstream"}))
        .await
        .expect("echo");
    assert!(text_of(&echo).contains("hello upstream"), "{echo}");

    // A long task: the upstream's progress shows while it works.
    let id = start_task(
        &client,
        "everything_trigger-long-running-operation",
        json!({"duration": 3, "steps": 3}),
    )
    .await;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let task = client.get_task(&id).await.expect("tasks/get");
        if let Some(m) = task["statusMessage"].as_str()
            && status(&task) == "working"
            && seen.last().is_none_or(|l: &String| l != m)
        {
            seen.push(m.to_owned());
        }
        if mcp_tasks_client::is_terminal(&task) {
            break task;
        }
        assert!(Instant::now() < deadline, "still {task}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        seen.iter().any(|m| m == "1/3" || m == "2/3"),
        "the upstream's progress as the status message: {seen:?}"
    );
    assert_eq!(status(&done), "completed", "{done}");
    assert!(
        text_of(&done["result"]).contains("Long running operation completed"),
        "{done}"
    );

    // A tool the upstream runs as a task of its own: followed to its end through us, its
    // stages shown as our status message.
    let id = start_task(
        &client,
        "everything_simulate-research-query",
        json!({"topic": "durable tasks"}),
    )
    .await;
    let mut stages = Vec::new();
    let done = loop {
        let task = client.get_task(&id).await.expect("tasks/get");
        if let Some(m) = task["statusMessage"].as_str()
            && stages.last().is_none_or(|l: &String| l != m)
        {
            stages.push(m.to_owned());
        }
        if mcp_tasks_client::is_terminal(&task) {
            break task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status(&done), "completed", "{done}");
    assert!(text_of(&done["result"]).contains("durable tasks"), "{done}");
    assert!(
        stages.iter().any(|m| m.contains("Analyzing")),
        "the upstream's stages: {stages:?}"
    );

    // Cancelled while the upstream works on it.
    let id = start_task(
        &client,
        "everything_trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
    )
    .await;
    crate::harness::eventually(
        Duration::from_secs(20),
        "progress from the upstream",
        || async {
            let task = client.get_task(&id).await.ok()?;
            task["statusMessage"]
                .as_str()?
                .contains("/30")
                .then_some(())
        },
    )
    .await;
    client.cancel_task(&id).await.expect("tasks/cancel");
    let done = wait_terminal(&client, &id, Duration::from_secs(20)).await;
    assert_eq!(status(&done), "cancelled", "{done}");
}

#[tokio::test]
async fn server_everything_over_stdio() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let argv = everything_argv("stdio").await;
    let path = scratch.write(
        "config.toml",
        &config(&format!("command = {}", toml_list(&argv))),
    );
    let fleet = Fleet::start(&path, 1).await;
    exercise(&fleet).await;
    // /readyz names the upstream and says it answers.
    let ready: Value = reqwest::get(fleet.replica.url().replace("/mcp", "/readyz"))
        .await
        .expect("readyz")
        .json()
        .await
        .expect("json");
    assert_eq!(ready["upstreams"][0]["name"], "everything", "{ready}");
    assert_eq!(ready["upstreams"][0]["reachable"], true, "{ready}");
}

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn start_http_everything(port: u16) -> mcp_tasks_spawn::Process {
    let argv = everything_argv("streamableHttp").await;
    let child = mcp_tasks_spawn::Spawn::new(&argv[0])
        .args(&argv[1..])
        .env("PORT", port.to_string())
        .logs(mcp_tasks_spawn::Logs::Discard)
        .start()
        .await
        .expect("starting server-everything");
    crate::harness::eventually(
        Duration::from_secs(30),
        "server-everything listening",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    child
}

#[tokio::test]
async fn server_everything_over_streamable_http_down_at_start() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let port = free_port();
    let path = scratch.write(
        "config.toml",
        &config(&format!(
            "url = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Test-Home = \"${{HOME}}\" }}"
        )),
    );
    // Nobody listens yet: the replica starts anyway, without the upstream's tools.
    let fleet = Fleet::start(&path, 1).await;
    let client = fleet.client();
    let tools = client.list_tools().await.expect("tools/list");
    assert!(
        tools.is_empty(),
        "no tools while the upstream is down: {tools:?}"
    );
    let ready: Value = reqwest::get(fleet.replica.url().replace("/mcp", "/readyz"))
        .await
        .expect("readyz")
        .json()
        .await
        .expect("json");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["upstreams"][0]["reachable"], false, "{ready}");

    let _server = start_http_everything(port).await;
    crate::harness::eventually(Duration::from_secs(30), "the upstream's tools", || async {
        (client.list_tools().await.ok()?.len() == 4).then_some(())
    })
    .await;
    // The worker found it too (it claims only tools it has).
    exercise(&fleet).await;
}

#[tokio::test]
async fn two_sources_exposing_one_name_refuse_to_start() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let db = TestDb::new().await;
    let scratch = Scratch::new();
    let argv = toml_list(&everything_argv("stdio").await);
    let path = scratch.write(
        "config.toml",
        &format!(
            "[[upstream]]\nname = \"one\"\ncommand = {argv}\ntools = [\"echo\"]\n\n[[upstream]]\nname = \"two\"\ncommand = {argv}\ntools = [\"echo\"]\n"
        ),
    );
    let out = procs::output(
        procs::mcp_tasks(
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tools",
                "none",
                "--config",
                &path,
            ],
            &[("DATABASE_URL", &db.url)],
        ),
        Duration::from_secs(60),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("\"echo\"") && stderr.contains("\"one\"") && stderr.contains("\"two\""),
        "the error names the tool and both sources: {stderr}"
    );
}

#[tokio::test]
async fn a_bad_configuration_file_names_key_and_line() {
    let db = TestDb::new().await;
    let scratch = Scratch::new();
    let path = scratch.write(
        "config.toml",
        "[[upstream]]\nname = \"x\"\ncommand = [\"true\"]\nretries = 3\n",
    );
    for sub in ["serve", "worker", "dev"] {
        let out = procs::output(
            procs::mcp_tasks(&[sub, "--config", &path], &[("DATABASE_URL", &db.url)]),
            Duration::from_secs(60),
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sub}: {stderr}");
        assert!(
            stderr.contains("line 4") && stderr.contains("retries"),
            "{sub}: {stderr}"
        );
    }
    // `--tools none` is no built-in pack at all.
    let replica = Proc::serve_args(
        &db.url,
        &["serve", "--listen", "127.0.0.1:0", "--tools", "none"],
        &[],
    )
    .await;
    let tools = mcp_tasks_client::Client::with_tasks(replica.url())
        .list_tools()
        .await
        .expect("tools/list");
    assert!(tools.is_empty(), "{tools:?}");
}
