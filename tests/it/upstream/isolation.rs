//! What an upstream child can see of us, and what one principal's call can hear of
//! another's, with the FastMCP server of `tests/upstreams/probe.py`:
//! - a stdio child starts from a cleared environment: the allowlist, `inherit_env` and
//!   `env`, never our database URL, keys, secrets or other upstreams' header variables,
//!   in the replica (sync-only) and in a worker;
//! - on a connection shared by two principals, a log message and an elicitation the
//!   upstream sends with no call to relate them to, just after Alice's call ended, never
//!   reach Bob's call that is open then; Bob's own elicitation still reaches Bob.

use crate::harness::{Need, skip};
use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::{Map, Value, json};

use super::{Fleet, Scratch, Setup, probe_argv, start_task, text_of, toml_list, wait_terminal};
use crate::harness::{eventually, jwt, status};

/// What README's security section says a child inherits without asking.
const ALLOWLIST: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];

/// Secret values of ours, one for each place a secret lives in our environment.
const STATE_KEY: &str = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2";
const JWT_SECRET: &str = "jwt-secret-that-must-stay-home-0123456789abcdef";
const HEADER_SECRET: &str = "header-secret-that-must-stay-home";

#[tokio::test]
async fn a_stdio_upstream_sees_only_the_allowlist_inherit_env_and_env() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let argv = toml_list(&probe_argv(&[]).await);
    let config = scratch.write(
        "config.toml",
        &format!(
            r#"
[[upstream]]
name = "probe"
command = {argv}
prefix = "task_"
tools = ["environment"]
mode = "task-required"
env = {{ GIVEN_BY_ENV = "from-env" }}
inherit_env = ["PASSED_ON_BY_NAME"]

[[upstream]]
name = "probesync"
command = {argv}
prefix = "sync_"
tools = ["environment"]
mode = "sync-only"
env = {{ GIVEN_BY_ENV = "from-env" }}
inherit_env = ["PASSED_ON_BY_NAME"]

# Never reached; its header is expanded from our environment.
[[upstream]]
name = "remote"
url = "http://127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer ${{UPSTREAM_HEADER_SECRET}}" }}
"#
        ),
    );
    let env = [
        ("MCP_TASKS_STATE_KEY", STATE_KEY),
        ("MCP_TASKS_JWT_HS256_SECRET", JWT_SECRET),
        ("UPSTREAM_HEADER_SECRET", HEADER_SECRET),
        ("PASSED_ON_BY_NAME", "inherited-value"),
        ("NOT_PASSED_ON", "stays-home"),
        ("LANG", "C.UTF-8"),
        ("TZ", "UTC"),
    ];
    let setup = Setup {
        env: env
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        ..Setup::default()
    };
    let fleet = Fleet::launch(&config, 1, setup).await;
    let client = fleet.client();
    eventually(
        Duration::from_secs(120),
        "the probe's tools on the replica",
        || async {
            let tools = client.list_tools().await.ok()?;
            (tools.len() == 2).then_some(())
        },
    )
    .await;

    // In the replica: a sync-only call.
    let answered = fleet
        .plain_client()
        .call_tool("sync_environment", json!({}))
        .await
        .expect("sync_environment");
    check(&environment(&answered), "the replica's child");

    // In a worker: a task (it waits until the worker has the tool).
    let id = start_task(&client, "task_environment", json!({})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(120)).await;
    assert_eq!(status(&done), "completed", "{done}");
    check(&environment(&done["result"]), "the worker's child");
}

fn environment(result: &Value) -> Map<String, Value> {
    let text = text_of(result);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not an environment ({e}): {text}"))
}

fn check(env: &Map<String, Value>, whose: &str) {
    let var = |name: &str| env.get(name).and_then(Value::as_str);
    assert_eq!(var("GIVEN_BY_ENV"), Some("from-env"), "{whose}: {env:?}");
    assert_eq!(
        var("PASSED_ON_BY_NAME"),
        Some("inherited-value"),
        "{whose}: {env:?}"
    );
    assert_eq!(var("LANG"), Some("C.UTF-8"), "{whose}: {env:?}");
    assert_eq!(var("TZ"), Some("UTC"), "{whose}: {env:?}");
    assert!(var("PATH").is_some(), "{whose}: {env:?}");
    let text = serde_json::to_string(env).expect("JSON");
    for secret in [
        STATE_KEY,
        JWT_SECRET,
        HEADER_SECRET,
        "postgres://",
        "stays-home",
    ] {
        assert!(!text.contains(secret), "{whose} saw {secret:?}: {env:?}");
    }
    // Nothing but the allowlist, `inherit_env` and `env`: not even our log settings.
    for name in env.keys() {
        assert!(
            ALLOWLIST.contains(&name.as_str())
                || matches!(name.as_str(), "GIVEN_BY_ENV" | "PASSED_ON_BY_NAME"),
            "{whose} saw {name}: {env:?}"
        );
    }
}

/// A replica that takes bearer tokens of [`jwt::ISSUER`] for its own URL, one worker.
async fn tenants(config: &str) -> (Fleet, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let resource = format!("http://{listen}/mcp");
    let setup = Setup {
        serve_args: vec!["--auth".into(), "jwt".into()],
        listen: Some(listen),
        tools: None,
        env: vec![
            ("MCP_TASKS_JWT_HS256_SECRET".into(), jwt::SECRET.into()),
            ("MCP_TASKS_JWT_ISSUER".into(), jwt::ISSUER.into()),
            ("MCP_TASKS_RESOURCE".into(), resource.clone()),
        ],
    };
    (Fleet::launch(config, 1, setup).await, resource)
}

fn client_of(fleet: &Fleet, resource: &str, sub: &str) -> Client {
    let token = jwt::hs256(jwt::SECRET.as_bytes(), &jwt::claims(resource, sub, "acme"));
    Client::with_tasks(fleet.replica.url()).bearer(token)
}

#[tokio::test]
async fn what_an_upstream_says_after_one_principals_call_never_reaches_anothers() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let argv = toml_list(&probe_argv(&["--legacy"]).await);
    let config = scratch.write(
        "config.toml",
        &format!(
            "[[upstream]]\nname = \"probe\"\ncommand = {argv}\ntools = [\"leak\", \"hold\", \"ask_name\"]\nmode = \"task-required\"\ntimeout_ms = 120000\n"
        ),
    );
    let (fleet, resource) = tenants(&config).await;
    fleet.wait_reachable().await;
    let alice = client_of(&fleet, &resource, "alice");
    let bob = client_of(&fleet, &resource, "bob");

    // Bob's call is open on the worker's connection, saying nothing, for a while.
    let held = start_task(&bob, "hold", json!({"seconds": 8})).await;
    eventually(Duration::from_secs(60), "Bob's call running", || async {
        let claimed = fleet
            .db
            .count_tasks("tool = 'hold' AND lease_owner IS NOT NULL")
            .await;
        (claimed == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Alice's call ends at once; a second later the upstream, on the same connection and
    // with nothing to relate them to, logs her secret and asks a question carrying it.
    let secret = "alice-secret-4f1c2d";
    let leaked = start_task(&alice, "leak", json!({"secret": secret, "delay": 1.0})).await;
    let done = wait_terminal(&alice, &leaked, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");

    // Bob's task, watched until it ends: never Alice's message, never her question.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let done = loop {
        let task = bob.get_task(&held).await.expect("tasks/get");
        assert!(
            !task.to_string().contains(secret),
            "Bob's task shows what the upstream said for Alice: {task}"
        );
        assert_ne!(status(&task), "input_required", "{task}");
        if mcp_tasks_client::is_terminal(&task) {
            break task;
        }
        assert!(tokio::time::Instant::now() < deadline, "{task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "held", "{done}");
    // The upstream was told no (its question belonged to no call we could name).
    eventually(
        Duration::from_secs(20),
        "the upstream's question refused",
        || async {
            fleet.workers[0]
                .logged("elicitation refused")
                .first()
                .cloned()
        },
    )
    .await;

    // Once Alice's call is long over, Bob's own question (same connection, no
    // association either) reaches Bob, and his answer reaches the upstream.
    let id = start_task(&bob, "ask_name", json!({})).await;
    let (task, key) = super::fastmcp_input::asked(&bob, &id).await;
    let field = task["inputRequests"][&key]["params"]["requestedSchema"]["properties"]
        .as_object()
        .and_then(|p| p.keys().next().cloned())
        .expect("a field");
    bob.update_task(
        &id,
        json!({ key: {"action": "accept", "content": { field: "Bob" }} }),
    )
    .await
    .expect("tasks/update");
    let done = wait_terminal(&bob, &id, Duration::from_secs(60)).await;
    assert_eq!(text_of(&done["result"]), "hello Bob", "{done}");
}
