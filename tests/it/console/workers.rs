//! The health page lists worker processes from the `workers` table: a worker with nothing
//! to do is there, idle; one stopped cleanly leaves the list; one killed is shown gone.
//! (What an admin sees of them besides is in `views.rs`.)

use std::time::Duration;

use super::{Console, console_on};
use crate::harness::procs::Proc;
use crate::harness::{TestApp, Worker, eventually, registry, worker_config};

/// The `<li>` of worker `id` on the page, if listed.
fn worker_item<'a>(body: &'a str, id: &str) -> Option<&'a str> {
    let at = body.find(&format!(r#"data-worker="{id}""#))?;
    let end = body[at..].find("</li>").map_or(body.len(), |e| at + e);
    Some(&body[at..end])
}

async fn health(console: &Console) -> String {
    let page = console.get("/console/health").await;
    assert_eq!(page.status, 200, "{page:?}");
    page.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_are_listed_and_leave_when_stopped_or_killed() {
    let app = TestApp::builder().config(console_on).start().await;
    let console = Console::new(app.url()).signed_as("acme", "alice");
    console.open().await;
    let empty = health(&console).await;
    assert!(empty.contains("No worker has been seen lately."), "{empty}");

    // An in-process worker with nothing to do, stopped cleanly.
    let mut config = worker_config();
    config.worker_id = "idle-in-process".into();
    let worker = Worker::start_with(&app.db.store, registry("conformance"), config);
    let listed = eventually(
        Duration::from_secs(20),
        "the idle worker listed",
        || async {
            let body = health(&console).await;
            worker_item(&body, "idle-in-process").map(str::to_owned)
        },
    )
    .await;
    assert!(listed.contains(r#"data-state="live""#), "{listed}");
    assert!(listed.contains(": 0 running"), "{listed}");
    assert!(listed.contains("slow_compute"), "its tools: {listed}");
    assert!(
        !listed.contains("pid "),
        "a principal is shown no pid: {listed}"
    );
    worker.stop().await;
    let body = health(&console).await;
    assert!(
        worker_item(&body, "idle-in-process").is_none(),
        "a cleanly stopped worker is still listed: {body}"
    );

    // A worker process killed outright: shown gone once it misses its refreshes.
    let killed = Proc::worker(
        &app.db.url,
        "conformance",
        &[
            ("MCP_TASKS_WORKER_ID", "killed-process"),
            ("MCP_TASKS_PRESENCE_MS", "200"),
        ],
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the worker process listed live",
        || async {
            let body = health(&console).await;
            worker_item(&body, "killed-process")
                .is_some_and(|w| w.contains(r#"data-state="live""#))
                .then_some(())
        },
    )
    .await;
    killed.kill().await;
    let gone = eventually(
        Duration::from_secs(30),
        "the killed worker shown gone",
        || async {
            let body = health(&console).await;
            worker_item(&body, "killed-process")
                .filter(|w| w.contains(r#"data-state="gone""#))
                .map(str::to_owned)
        },
    )
    .await;
    assert!(!gone.contains("running"), "{gone}");
    app.stop().await;
}
