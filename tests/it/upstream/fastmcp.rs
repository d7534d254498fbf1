//! A FastMCP (PyPI) server written here: a slow tool that records whether it saw
//! cancellation, a tool that reports the trace context it was called with, a tool that raises, and a tool that crashes its own process. Our
//! workers are SIGKILLed mid-call too: idempotent tools run again and complete,
//! others fail saying why they were not run again.

use std::time::Duration;

use serde_json::json;

use super::{Fleet, Scratch, python, start_task, text_of, wait_terminal};
use crate::harness::{Need, eventually, skip, status};

const SERVER: &str = r#"
import asyncio, os, sys
from fastmcp import FastMCP, Context

mcp = FastMCP("pyserver")

def note(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")

@mcp.tool
async def slow(marker: str, seconds: float = 30.0, ctx: Context = None) -> str:
    """Works for a while, writing to marker what happened."""
    note(marker, "started")
    try:
        steps = max(1, int(seconds * 10))
        for i in range(steps):
            await asyncio.sleep(0.1)
            if i % 10 == 0 and ctx is not None:
                await ctx.report_progress(i // 10, steps // 10, f"second {i // 10}")
    except asyncio.CancelledError:
        note(marker, "cancelled")
        raise
    note(marker, "finished")
    return "slow done"

@mcp.tool
async def traced(ctx: Context = None) -> str:
    """Answers with the traceparent its call carried in _meta, or "none"."""
    meta = None
    try:
        meta = ctx.request_context.meta
    except Exception:
        pass
    if isinstance(meta, dict):
        found = meta.get("traceparent")
    else:
        found = getattr(meta, "traceparent", None) or (getattr(meta, "model_extra", None) or {}).get("traceparent")
    return found or "none"

@mcp.tool
def explode() -> str:
    """Always raises."""
    raise ValueError("the tool blew up")

@mcp.tool
async def crash_once(marker: str) -> str:
    """Kills its own process the first time (while the call is open), then works."""
    if not os.path.exists(marker):
        note(marker, "crashing")
        await asyncio.sleep(0.3)
        os._exit(3)
    note(marker, "survived")
    return "survived the crash"

if __name__ == "__main__":
    mcp.run(show_banner=False)
"#;

/// The configuration: the Python server over stdio, the same tools twice: idempotent
/// (`py_`) and not (`pyonce_`).
async fn setup(scratch: &Scratch) -> String {
    let script = scratch.write("server.py", SERVER);
    let py = python().await;
    let entry = |name: &str, prefix: &str, idempotent: bool| {
        format!(
            "[[upstream]]\nname = \"{name}\"\ncommand = [{py:?}, {script:?}]\nprefix = \"{prefix}\"\nmode = \"task-required\"\nidempotent = {idempotent}\nmax_attempts = 3\ntimeout_ms = 60000\n\n"
        )
    };
    let text = entry("py", "py_", true) + &entry("pyonce", "pyonce_", false);
    scratch.write("config.toml", &text)
}

fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn fastmcp_cancellation_errors_and_crashes() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();

    // A raising tool: the upstream's isError result, and the task completed (as the spec says).
    let id = start_task(&client, "py_explode", json!({})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(30)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(text_of(&done["result"]).contains("blew up"), "{done}");

    // The run's trace context reaches the upstream in _meta: a W3C traceparent.
    let id = start_task(&client, "py_traced", json!({})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(30)).await;
    assert_eq!(status(&done), "completed", "{done}");
    let traceparent = text_of(&done["result"]);
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert!(
        parts.len() == 4
            && parts[0] == "00"
            && parts[1].len() == 32
            && parts[2].len() == 16
            && parts[1] != "0".repeat(32),
        "the upstream saw no valid traceparent: {traceparent:?}"
    );

    // Cancellation reaches the upstream's handler.
    let marker = scratch.path("slow-cancel");
    let id = start_task(&client, "py_slow", json!({"marker": marker})).await;
    eventually(Duration::from_secs(20), "progress from FastMCP", || async {
        let task = client.get_task(&id).await.ok()?;
        task["statusMessage"]
            .as_str()?
            .contains("second")
            .then_some(())
    })
    .await;
    client.cancel_task(&id).await.expect("tasks/cancel");
    let done = wait_terminal(&client, &id, Duration::from_secs(20)).await;
    assert_eq!(status(&done), "cancelled", "{done}");
    eventually(
        Duration::from_secs(10),
        "the upstream saw the cancellation",
        || async {
            lines(&marker)
                .contains(&"cancelled".to_owned())
                .then_some(())
        },
    )
    .await;

    // The upstream process dies mid-call. Idempotent: called again once the child is
    // restarted, and completes.
    let marker = scratch.path("crash-idempotent");
    let id = start_task(&client, "py_crash_once", json!({"marker": marker})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "survived the crash", "{done}");
    assert_eq!(lines(&marker), ["crashing", "survived"]);

    // Not idempotent: failed, saying so, and the call is not repeated.
    let marker = scratch.path("crash-once");
    let id = start_task(&client, "pyonce_crash_once", json!({"marker": marker})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "failed", "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"pyonce\"") && message.contains("not marked idempotent"),
        "{done}"
    );
    assert_eq!(lines(&marker), ["crashing"]);

    // And the next call on that upstream works (its child was restarted).
    let marker = scratch.path("after-crash");
    let id = start_task(
        &client,
        "pyonce_slow",
        json!({"marker": marker, "seconds": 0.2}),
    )
    .await;
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "slow done", "{done}");
}

#[tokio::test]
async fn a_worker_killed_mid_call_reruns_only_idempotent_tools() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let mut fleet = Fleet::start(&setup(&scratch).await, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();
    let again = scratch.path("again");
    let once = scratch.path("once");
    let rerun = start_task(&client, "py_slow", json!({"marker": again, "seconds": 10})).await;
    let failed = start_task(
        &client,
        "pyonce_slow",
        json!({"marker": once, "seconds": 10}),
    )
    .await;
    eventually(
        Duration::from_secs(90),
        "both calls under way upstream",
        || async { (lines(&again).len() == 1 && lines(&once).len() == 1).then_some(()) },
    )
    .await;
    // SIGKILL: the worker (and so its stdio children) gone without a word.
    fleet.workers.pop().expect("a worker").kill().await;
    fleet.add_worker().await;

    let done = wait_terminal(&client, &rerun, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "slow done", "{done}");
    assert_eq!(lines(&again).first().map(String::as_str), Some("started"));
    assert!(
        lines(&again).iter().filter(|l| *l == "started").count() >= 2,
        "run again: {:?}",
        lines(&again)
    );

    let done = wait_terminal(&client, &failed, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "failed", "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("worker")
            && message.contains("was lost")
            && message.contains("not marked idempotent"),
        "{done}"
    );
    // The killed worker's orphaned child may still have written how its call ended, but
    // the call was never started again.
    let started = lines(&once).iter().filter(|l| *l == "started").count();
    assert_eq!(started, 1, "not run again: {:?}", lines(&once));
}

/// An upstream slower to start than rmcp's 10 s discovery probe (an interpreter importing
/// its SDK on a loaded machine) answers the probe after the fallback began; the next
/// connection skips the probe, and its tools appear.
#[tokio::test]
async fn an_upstream_slower_than_the_discovery_probe_is_reached() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let scratch = Scratch::new();
    let script = scratch.write("server.py", SERVER);
    let slow = scratch.write(
        "slow.py",
        &format!("import runpy, time\ntime.sleep(12)\nrunpy.run_path({script:?}, run_name=\"__main__\")\n"),
    );
    let py = python().await;
    let config = scratch.write(
        "config.toml",
        &format!("[[upstream]]\nname = \"slowpy\"\ncommand = [{py:?}, {slow:?}]\nprefix = \"slow_\"\nmode = \"task-required\"\n"),
    );
    let fleet = Fleet::start(&config, 1).await;
    fleet.wait_reachable().await;
    let client = fleet.client();
    let id = start_task(&client, "slow_explode", json!({})).await;
    let done = wait_terminal(&client, &id, Duration::from_secs(90)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
}
