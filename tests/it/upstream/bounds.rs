//! What an upstream can make us hold, and what it can make us pass on:
//! - a result over the upstream's `max_result_bytes` fails its call at once with a clear
//!   error (over stdio and Streamable HTTP, just over the limit and far over it), and the
//!   connection goes on serving;
//! - a long stderr line is logged cut short, never held whole;
//! - at most 1000 tools are taken from one `tools/list`, the rest reported;
//! - an input request reaches our client with only the fields the schema declares, and
//!   only if it is something we offered upstreams (no URL-mode elicitation, no sampling
//!   with tools): `tests/upstreams/raw.py` sends what an SDK would not.

use crate::harness::{Need, skip};
use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::{Value, json};

use super::fastmcp_input::{asked, asked_for};
use super::{Fleet, Scratch, probe_argv, python, start_task, text_of, toml_list, wait_terminal};
use crate::harness::procs;
use crate::harness::{eventually, status};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The probe serving Streamable HTTP on `port`, until dropped.
async fn http_probe(port: u16, label: &str) -> tokio::process::Child {
    let argv = probe_argv(&["--http", &port.to_string(), "--label", label]).await;
    let mut cmd = tokio::process::Command::from(procs::command(&argv[0]));
    cmd.args(&argv[1..])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd.spawn().expect("starting the HTTP probe")
}

#[tokio::test]
async fn an_oversized_result_fails_its_call_at_once_and_the_connection_goes_on() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let argv = toml_list(&probe_argv(&[]).await);
    let port = free_port();
    let _http = http_probe(port, "remote").await;
    let config = scratch.write(
        "config.toml",
        &format!(
            r#"
[[upstream]]
name = "small"
command = {argv}
tools = ["big"]
mode = "task-required"
timeout_ms = 600000
max_result_bytes = 65536

[[upstream]]
name = "smallhttp"
url = "http://127.0.0.1:{port}/mcp"
prefix = "http_"
tools = ["big"]
mode = "task-required"
timeout_ms = 600000
max_result_bytes = 65536
"#
        ),
    );
    let fleet = Fleet::start(&config, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();
    // Over the limit but within what the transport takes (FastMCP sends the text twice:
    // as content and as structured content), far over it (never read whole), and then a
    // small one on the same connection.
    for tool in ["big", "http_big"] {
        for (size, fits) in [
            (1000, true),
            (40_000, false),
            (3_000_000, false),
            (10, true),
        ] {
            let id = start_task(&client, tool, json!({ "size": size })).await;
            // Far within the call's 600 s timeout: the call fails when the answer comes.
            let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
            if fits {
                assert_eq!(status(&done), "completed", "{tool} {size}: {done}");
                assert_eq!(text_of(&done["result"]).len(), size, "{tool} {size}");
            } else {
                assert_eq!(status(&done), "failed", "{tool} {size}: {done}");
                let message = done["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains("more than 65536 bytes")
                        && message.contains("max_result_bytes"),
                    "{tool} {size}: {done}"
                );
                assert_eq!(
                    done["error"]["data"]["reason"], "UPSTREAM_RESULT_TOO_LARGE",
                    "{tool} {size}: {done}"
                );
            }
        }
    }
}

/// The most memory the process has held (its peak resident set), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[tokio::test]
async fn a_long_stderr_line_is_logged_cut_short_and_never_held_whole() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let argv = toml_list(&probe_argv(&[]).await);
    let config = scratch.write(
        "config.toml",
        &format!(
            "[[upstream]]\nname = \"loud\"\ncommand = {argv}\ntools = [\"shout\"]\nmode = \"task-required\"\n"
        ),
    );
    let fleet = Fleet::start(&config, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();
    let worker = &fleet.workers[0];
    let before = peak_kib(worker.pid());
    let size = 48 * 1024 * 1024;
    let id = start_task(&client, "shout", json!({ "size": size })).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(120)).await;
    assert_eq!(status(&done), "completed", "{done}");
    let line = eventually(Duration::from_secs(30), "the line logged", || async {
        worker.logged("stderr: yyyy").into_iter().next()
    })
    .await;
    assert!(
        line.len() < 4096 + 512,
        "logged whole: {} bytes",
        line.len()
    );
    assert!(line.contains("more bytes left out"), "{}", &line[..200]);
    let grown = peak_kib(worker.pid()).saturating_sub(before);
    assert!(
        grown < 24 * 1024,
        "the worker's peak memory grew by {grown} KiB for one {size}-byte stderr line"
    );
}

#[tokio::test]
async fn at_most_1000_tools_are_taken_from_one_upstream() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let argv = toml_list(&probe_argv(&["--many", "1005"]).await);
    let config = scratch.write(
        "config.toml",
        &format!("[[upstream]]\nname = \"many\"\ncommand = {argv}\nmode = \"sync-only\"\n"),
    );
    let fleet = Fleet::start(&config, 0).await;
    let url = fleet.replica.url().replace("/mcp", "/readyz");
    // 1005 of its own and the probe's nine.
    let report = eventually(Duration::from_secs(120), "the list read", || async {
        let ready: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        let upstream = ready["upstreams"][0].clone();
        (upstream["reachable"] == true).then_some(upstream)
    })
    .await;
    assert_eq!(report["tools"], 1000, "{report}");
    assert_eq!(report["tools_left_out"], 14, "{report}");
    assert_eq!(
        fleet.client().list_tools().await.expect("tools/list").len(),
        1000
    );
}

#[tokio::test]
async fn input_requests_reach_the_client_only_as_declared() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("upstreams/raw.py");
    let argv = toml_list(&[python().await, script.display().to_string()]);
    let config = scratch.write(
        "config.toml",
        &format!(
            "[[upstream]]\nname = \"raw\"\ncommand = {argv}\nmode = \"task-required\"\ntimeout_ms = 120000\n"
        ),
    );
    let fleet = Fleet::start(&config, 1).await;
    fleet.wait_reachable().await;
    // A client that would take anything: URL-mode elicitation and sampling too.
    let mut caps = mcp_tasks_client::tasks_capabilities();
    caps["elicitation"] = json!({ "form": {}, "url": {} });
    caps["sampling"] = json!({});
    let client = Client::new(fleet.replica.url(), caps);

    // An upstream task's input request with fields of its own, at every level.
    let id = start_task(&client, "task_extra", json!({})).await;
    let (task, key) = asked(&client, &id).await;
    let request = &task["inputRequests"][&key];
    assert!(!request.to_string().contains("x-extra"), "{request}");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["choice"],
        json!({"type": "string", "title": "Choice"}),
        "{request}"
    );
    client
        .update_task(
            &id,
            json!({ key: {"action": "accept", "content": {"choice": "a"}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert!(
        text_of(&done["result"]).contains("\"choice\": \"a\""),
        "{done}"
    );

    // Sampling, on the back channel: its own fields and a context we do not offer left out.
    let id = start_task(&client, "sample", json!({})).await;
    let (task, key) = asked_for(&client, &id, "sampling/createMessage").await;
    let params = &task["inputRequests"][&key]["params"];
    assert_eq!(
        params,
        &json!({
            "maxTokens": 10,
            "metadata": {"k": "v"},
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        }),
        "{task}"
    );
    client
        .update_task(
            &id,
            json!({ key: {"role": "assistant", "model": "m", "content": {"type": "text", "text": "ok"}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");

    // What we did not offer never reaches the client; the upstream hears why.
    for (arguments, why) in [
        (json!({"tools": true}), "sampling with \\\"tools\\\""),
        (json!({}), "URL-mode elicitation"),
    ] {
        let tool = if arguments["tools"] == true {
            "sample"
        } else {
            "url"
        };
        let id = start_task(&client, tool, arguments).await;
        let done = never_asked(&client, &id).await;
        assert_eq!(status(&done), "completed", "{done}");
        assert!(text_of(&done["result"]).contains(why), "{done}");
    }
}

/// The task's end, checking on the way that it never asked the client anything.
async fn never_asked(client: &Client, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let task = client.get_task(id).await.expect("tasks/get");
        assert_ne!(status(&task), "input_required", "{task}");
        if mcp_tasks_client::is_terminal(&task) {
            return task;
        }
        assert!(tokio::time::Instant::now() < deadline, "{task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
