//! A FastMCP (PyPI) tool that asks for input during its call, through us: its request
//! becomes our task's `inputRequests`, answered with `tasks/update` (on another replica
//! too), and the tool completes with the answer. Both ways FastMCP asks: over a
//! handshake-era connection (`ctx.elicit`, a request on the back channel, answered while
//! the call stays open) and over a 2026-07-28 one (an `InputRequiredResult`, answered in
//! the retried call). The worker holds the task meanwhile: a cancellation reaches the
//! waiting tool, and a worker killed while waiting loses the call, per the idempotency
//! policy.

use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::{Value, json};

use super::{Fleet, Scratch, official, python, start_task, text_of, wait_terminal};
use crate::harness::{Need, eventually, skip, status};

const SERVER: &str = r#"
import asyncio, sys
if "legacy" in sys.argv:
    # Speak only the handshake-era revisions, where a tool asks on the back channel.
    import mcp_types.version as v
    v.MODERN_PROTOCOL_VERSIONS = ()
    v.SUPPORTED_PROTOCOL_VERSIONS = tuple(v.HANDSHAKE_PROTOCOL_VERSIONS)
if "modern" in sys.argv:
    # Refuse `initialize`, so a connection that gave up on discovery (a slow start)
    # comes back to it rather than settling for a handshake-era session.
    from mcp.server.runner import ServerRunner
    from mcp.shared.exceptions import MCPError
    def _refuse(params):
        raise MCPError(-32022, "Unsupported protocol version")
    ServerRunner._negotiate_initialize = staticmethod(_refuse)
from fastmcp import FastMCP, Context
from mcp_types import InputRequiredResult, ElicitRequest, ElicitRequestFormParams

mcp = FastMCP("pyinput")

def note(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")

@mcp.tool
async def ask_name(marker: str, ctx: Context) -> str:
    """Asks for a name while the call is open (handshake-era back channel)."""
    note(marker, "asked")
    try:
        answer = await ctx.elicit("What is your name?", str)
    except asyncio.CancelledError:
        note(marker, "cancelled")
        raise
    note(marker, "answered " + answer.action)
    if answer.action == "accept":
        return "hello " + answer.data
    return "no name: " + answer.action

@mcp.tool
async def guarded_name(marker: str, ctx: Context) -> str:
    """Asks for a name with an InputRequiredResult (2026-07-28), then greets."""
    answers = ctx.input_responses
    if not answers or "name" not in answers:
        note(marker, "asked")
        return InputRequiredResult(input_requests={"name": ElicitRequest(params=ElicitRequestFormParams(
            message="What is your name?",
            requested_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        ))})
    answer = answers["name"]
    note(marker, "answered " + answer.action)
    if answer.action == "accept":
        return "hello " + answer.content["name"]
    return "no name: " + answer.action

@mcp.tool
async def greedy(count: int, size: int, ctx: Context) -> str:
    """Asks for `count` inputs at once, each with a message of `size` characters."""
    return InputRequiredResult(input_requests={f"k{i}": ElicitRequest(params=ElicitRequestFormParams(
        message="x" * size,
        requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
    )) for i in range(count)})

if __name__ == "__main__":
    mcp.run(show_banner=False)
"#;

/// The configuration: the server over a handshake-era connection (`legacy_`, and
/// `legacyonce_` not idempotent) and over a 2026-07-28 one (`modern_`).
async fn setup(scratch: &Scratch) -> String {
    let script = scratch.write("server.py", SERVER);
    let py = python().await;
    let entry = |name: &str, prefix: &str, legacy: bool, idempotent: bool| {
        let era = if legacy { "legacy" } else { "modern" };
        let argv = format!("[{py:?}, {script:?}, {era:?}]");
        format!(
            "[[upstream]]\nname = \"{name}\"\ncommand = {argv}\nprefix = \"{prefix}\"\nmode = \"task-required\"\nidempotent = {idempotent}\nmax_attempts = 3\ntimeout_ms = 120000\n\n"
        )
    };
    let text = entry("legacy", "legacy_", true, true)
        + &entry("legacyonce", "legacyonce_", true, false)
        + &entry("modern", "modern_", false, false);
    scratch.write("config.toml", &text)
}

fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until the task asks for input, checks what `tasks/get` shows against the
/// official schema, and returns the task and its one input key.
pub(super) async fn asked(client: &Client, id: &str) -> (Value, String) {
    asked_for(client, id, "elicitation/create").await
}

/// [`asked`], for a request of `method`.
pub(super) async fn asked_for(client: &Client, id: &str, method: &str) -> (Value, String) {
    let task = eventually(
        Duration::from_secs(60),
        "the task asks for input",
        || async {
            let task = client.get_task(id).await.ok()?;
            (status(&task) == "input_required").then_some(task)
        },
    )
    .await;
    let tasks = official::Definitions::load(official::Schema::Tasks);
    tasks.check("InputRequiredTask", &task);
    let requests = task["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{task}");
    let (key, request) = requests.iter().next().expect("one request");
    assert_eq!(request["method"], method, "{task}");
    (task.clone(), key.clone())
}

/// The one property the request's schema asks for.
fn property(task: &Value, key: &str) -> String {
    let properties = task["inputRequests"][key]["params"]["requestedSchema"]["properties"]
        .as_object()
        .expect("requestedSchema.properties");
    assert_eq!(properties.len(), 1, "{task}");
    properties.keys().next().cloned().unwrap_or_default()
}

#[tokio::test]
async fn fastmcp_input_requests_are_answered_through_tasks_update() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let fleet = Fleet::start(&setup(&scratch).await, 1).await;
    let other = fleet.add_replica().await;
    fleet.wait_reachable().await;
    let client = fleet.client();
    // Answers go through another replica than the one that created the task.
    let elsewhere = Client::with_tasks(other.url());

    for tool in ["legacy_ask_name", "modern_guarded_name"] {
        let marker = scratch.path(&format!("{tool}-accept"));
        let id = start_task(&client, tool, json!({"marker": marker})).await;
        let (task, key) = asked(&client, &id).await;
        let field = property(&task, &key);
        elsewhere
            .update_task(
                &id,
                json!({ key.clone(): {"action": "accept", "content": { field: "Ada" }} }),
            )
            .await
            .expect("tasks/update");
        let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "completed", "{tool}: {done}");
        assert_eq!(text_of(&done["result"]), "hello Ada", "{tool}: {done}");
        assert_eq!(lines(&marker), ["asked", "answered accept"], "{tool}");

        // Decline and cancel reach the tool as what they are.
        for action in ["decline", "cancel"] {
            let marker = scratch.path(&format!("{tool}-{action}"));
            let id = start_task(&client, tool, json!({"marker": marker})).await;
            let (_, key) = asked(&client, &id).await;
            client
                .update_task(&id, json!({ key: {"action": action} }))
                .await
                .expect("tasks/update");
            let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
            assert_eq!(status(&done), "completed", "{tool}: {done}");
            assert_eq!(
                text_of(&done["result"]),
                format!("no name: {action}"),
                "{tool}: {done}"
            );
            assert_eq!(
                lines(&marker),
                ["asked".to_owned(), format!("answered {action}")],
                "{tool}"
            );
        }
    }
}

#[tokio::test]
async fn what_an_upstream_may_ask_is_bounded() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();
    for (arguments, says) in [
        (json!({"count": 40, "size": 10}), "more than 32 times"),
        (
            json!({"count": 1, "size": 100_000}),
            "larger than 65536 bytes",
        ),
    ] {
        let id = start_task(&client, "modern_greedy", arguments.clone()).await;
        let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "failed", "{arguments}: {done}");
        let message = done["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(says) && message.contains("\"modern\""),
            "{arguments}: {done}"
        );
    }

    // A client that did not declare elicitation is never asked; the tool hears so.
    let plain = Client::new(
        fleet.replica.url(),
        json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } }),
    );
    let marker = scratch.path("undeclared");
    let id = start_task(&plain, "legacy_ask_name", json!({"marker": marker})).await;
    let done = wait_terminal(&plain, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        text_of(&done["result"]).contains("did not declare"),
        "{done}"
    );
    assert_eq!(lines(&marker), ["asked"]);
}

#[tokio::test]
async fn cancelling_a_task_waiting_for_input_reaches_the_upstream_tool() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();

    let marker = scratch.path("cancel-open");
    let id = start_task(&client, "legacy_ask_name", json!({"marker": marker})).await;
    asked(&client, &id).await;
    client.cancel_task(&id).await.expect("tasks/cancel");
    let done = wait_terminal(&client, &id, Duration::from_secs(30)).await;
    assert_eq!(status(&done), "cancelled", "{done}");
    eventually(
        Duration::from_secs(15),
        "the waiting tool saw the cancellation",
        || async {
            lines(&marker)
                .contains(&"cancelled".to_owned())
                .then_some(())
        },
    )
    .await;

    // Between rounds (2026-07-28) no call is open: the task is cancelled and the tool
    // is not called again.
    let marker = scratch.path("cancel-rounds");
    let id = start_task(&client, "modern_guarded_name", json!({"marker": marker})).await;
    let (_, key) = asked(&client, &id).await;
    client.cancel_task(&id).await.expect("tasks/cancel");
    let done = wait_terminal(&client, &id, Duration::from_secs(30)).await;
    assert_eq!(status(&done), "cancelled", "{done}");
    // A late answer changes nothing (whether or not it is refused).
    let _ = client
        .update_task(
            &id,
            json!({ key: {"action": "accept", "content": {"name": "Ada"}} }),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        status(&client.get_task(&id).await.expect("tasks/get")),
        "cancelled"
    );
    assert_eq!(lines(&marker), ["asked"]);
}

#[tokio::test]
async fn a_worker_killed_while_waiting_for_input_loses_the_call() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let mut fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();

    let once = scratch.path("once");
    let again = scratch.path("again");
    let failed = start_task(&client, "legacyonce_ask_name", json!({"marker": once})).await;
    let rerun = start_task(&client, "legacy_ask_name", json!({"marker": again})).await;
    let (_, first_key) = asked(&client, &rerun).await;
    asked(&client, &failed).await;

    // SIGKILL: the worker, its upstream calls and their children gone without a word.
    fleet.workers.pop().expect("a worker").kill().await;
    fleet.add_worker().await;

    // Not idempotent: failed, saying why, never asked again.
    let done = wait_terminal(&client, &failed, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "failed", "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("was lost") && message.contains("not marked idempotent"),
        "{done}"
    );
    // (The killed worker's orphaned child may have noted how its call ended.)
    let asked_once = lines(&once).iter().filter(|l| *l == "asked").count();
    assert_eq!(asked_once, 1, "not asked again: {:?}", lines(&once));

    // Idempotent: run again, which asks again under a new key; the old key is dead.
    let task = eventually(Duration::from_secs(60), "the re-run asks again", || async {
        let task = client.get_task(&rerun).await.ok()?;
        let keys = task["inputRequests"].as_object()?;
        (status(&task) == "input_required" && !keys.contains_key(&first_key)).then_some(task)
    })
    .await;
    let key = task["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .expect("a key");
    let field = property(&task, &key);
    client
        .update_task(
            &rerun,
            json!({ first_key: {"action": "decline"}, key: {"action": "accept", "content": { field: "Bo" }} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &rerun, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "hello Bo", "{done}");
    assert_eq!(
        lines(&again).iter().filter(|l| *l == "asked").count(),
        2,
        "{:?}",
        lines(&again)
    );
}
