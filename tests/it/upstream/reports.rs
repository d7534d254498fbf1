//! What the replica reports of its upstreams, and what it keeps to itself:
//! - an upstream whose list changes (`notifications/tools/list_changed`) can add tools
//!   but never take a name over from a built-in tool or another upstream: the clashing
//!   tool is refused, the old owner keeps the name, and `/readyz` and the log say so;
//! - an upstream's own error text (an HTTP upstream's URL with a secret query string, a
//!   stdio upstream's program that cannot start) never reaches `/readyz` or a task's
//!   error: both carry a generic message with an id, which the log line with the
//!   details carries too.

use crate::harness::{Need, skip};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Fleet, Scratch, Setup, probe_argv, start_task, text_of, toml_list, wait_terminal};
use crate::harness::{eventually, status};

async fn readyz(fleet: &Fleet) -> Option<Value> {
    let url = fleet.replica.url().replace("/mcp", "/readyz");
    reqwest::get(&url).await.ok()?.json().await.ok()
}

fn upstream<'a>(ready: &'a Value, name: &str) -> Option<&'a Value> {
    ready["upstreams"]
        .as_array()?
        .iter()
        .find(|u| u["name"] == name)
}

#[tokio::test]
async fn a_relisted_tool_never_takes_over_a_name() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    // Handshake-era, where the server says when its list changed.
    let first = toml_list(&probe_argv(&["--label", "first", "--legacy"]).await);
    let second = toml_list(&probe_argv(&["--label", "second", "--tool", "victim"]).await);
    // `first` comes first in the file, so an order-based merge would give it the name.
    let config = scratch.write(
        "config.toml",
        &format!(
            r#"
[[upstream]]
name = "first"
command = {first}
mode = "sync-only"

[[upstream]]
name = "second"
command = {second}
prefix = "s_"
tools = ["victim", "whoami"]
mode = "sync-only"
"#
        ),
    );
    let setup = Setup {
        tools: Some("demo".into()),
        ..Setup::default()
    };
    let fleet = Fleet::launch(&config, 0, setup).await;
    fleet.wait_reachable().await;
    let client = fleet.plain_client();
    let call = |name: &'static str, arguments: Value| {
        let client = &client;
        async move {
            client
                .call_tool(name, arguments)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    };
    assert_eq!(
        text_of(&call("s_victim", json!({})).await),
        "second's victim"
    );

    // `first` grows a tool of `second`'s name, one of a built-in tool's name, and then a
    // new one: once that shows, its list has been read with all three.
    call("grow", json!({"name": "s_victim"})).await;
    call("grow", json!({"name": "generate_report"})).await;
    call("grow", json!({"name": "fresh"})).await;
    eventually(Duration::from_secs(30), "the changed list read", || async {
        let tools = client.list_tools().await.ok()?;
        tools.iter().any(|t| t["name"] == "fresh").then_some(())
    })
    .await;
    assert_eq!(text_of(&call("fresh", json!({})).await), "first's fresh");

    // The old owners keep their names.
    assert_eq!(
        text_of(&call("s_victim", json!({})).await),
        "second's victim"
    );
    let tools = client.list_tools().await.expect("tools/list");
    let report_tool = tools
        .iter()
        .find(|t| t["name"] == "generate_report")
        .expect("the built-in tool");
    assert!(
        !report_tool["description"]
            .as_str()
            .unwrap_or_default()
            .contains("who serves"),
        "the built-in tool, not first's: {report_tool}"
    );
    let ready = readyz(&fleet).await.expect("/readyz");
    let report = upstream(&ready, "first").expect("first").clone();
    let refused = report["refused"].as_array().expect("refused");
    let reason = |tool: &str| {
        refused
            .iter()
            .find(|r| r["tool"] == tool)
            .and_then(|r| r["reason"].as_str())
            .unwrap_or_else(|| panic!("{tool} not reported: {report}"))
            .to_owned()
    };
    assert!(reason("s_victim").contains("\"second\""), "{report}");
    assert!(reason("generate_report").contains("built-in"), "{report}");
    assert_eq!(report["tools"], 10, "the probe's nine and fresh: {report}");
    assert!(
        !fleet
            .replica
            .logged("upstream tool refused: its name is taken")
            .is_empty()
    );
}

/// The 6-hex-digit id in "(error 3f2a9c)".
fn error_id(text: &str) -> String {
    let (_, rest) = text
        .split_once("(error ")
        .unwrap_or_else(|| panic!("no error id in {text:?}"));
    let id: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    assert_eq!(id.len(), 6, "{text:?}");
    id
}

#[tokio::test]
async fn an_upstreams_raw_error_text_reaches_only_the_log() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let secret = "sekrit-query-value";
    // A port nobody listens on (bound and let go): an HTTP upstream never reached.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // A stdio upstream whose program goes away while it runs, so that starting it again
    // fails with words that name it.
    let dir = scratch.path(&format!("dir-{secret}"));
    std::fs::create_dir_all(&dir).expect("a folder");
    let program = format!("{dir}/probe");
    let argv = probe_argv(&["--label", "local"]).await;
    std::fs::write(
        &program,
        format!("#!/bin/sh\nexec {:?} {:?} \"$@\"\n", argv[0], argv[1]),
    )
    .expect("the program");
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("executable");
    let config = scratch.write(
        "config.toml",
        &format!(
            r#"
[[upstream]]
name = "dead"
url = "http://127.0.0.1:{dead}/mcp?access_token={secret}"

[[upstream]]
name = "local"
command = [{program:?}, "--label", "local"]
tools = ["whoami", "die"]
mode = "task-required"
idempotent = true
max_attempts = 2
"#
        ),
    );
    let fleet = Fleet::start(&config, 1).await;
    let client = fleet.client();

    // /readyz, which anyone may read: no URL, no query string; an id the log has too.
    let ready = eventually(Duration::from_secs(120), "local up, dead down", || async {
        let ready = readyz(&fleet).await?;
        let up = upstream(&ready, "local")?["reachable"] == true;
        let down = upstream(&ready, "dead")?["error"].is_string();
        (up && down).then_some(ready)
    })
    .await;
    let text = ready.to_string();
    assert!(
        !text.contains(secret) && !text.contains(&format!(":{dead}")),
        "{ready}"
    );
    let said = upstream(&ready, "dead").expect("dead")["error"]
        .as_str()
        .expect("error")
        .to_owned();
    assert!(said.contains("\"dead\" is not reachable"), "{said}");
    let id = error_id(&said);
    let logged = fleet.replica.logged(&id);
    assert!(
        logged
            .iter()
            .any(|l| l.contains("upstream not reachable") && l.contains(secret)),
        "{id} and the upstream's own words not in the replica's log: {logged:?}"
    );

    // The worker calls `local`; then its program goes away, and the child with it.
    let id = start_task(&client, "whoami", json!({})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(120)).await;
    assert_eq!(text_of(&done["result"]), "local", "{done}");
    std::fs::remove_file(&program).expect("removing the program");
    let id = start_task(&client, "die", json!({})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(120)).await;
    assert_eq!(status(&done), "failed", "{done}");
    assert!(!done.to_string().contains(secret), "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("\"local\" is not reachable"), "{done}");
    let id = error_id(message);
    let logged = fleet.workers[0].logged(&id);
    assert!(
        logged.iter().any(|l| l.contains(secret)),
        "{id} and the upstream's own words not in the worker's log: {logged:?}"
    );
}
