//! A 2026-07-28 upstream that runs its tools as tasks of its own (Tasks extension): our
//! own `mcp-tasks serve --tools conformance`, with a worker, on a database of its own.
//! Our tools/call declares the extension, so the upstream answers with a flat
//! `CreateTaskResult`; we follow it with `tasks/get`, answer its `inputRequests` with
//! `tasks/update`, and turn our cancellation into its `tasks/cancel`. The upstream's
//! database shows that its task existed and how it ended.

use std::time::Duration;

use serde_json::json;

use super::fastmcp_input::asked;
use super::{FAST_WORKER, Fleet, Scratch, start_task, text_of, wait_terminal};
use crate::harness::procs::Proc;
use crate::harness::{TestDb, eventually, status};

/// The upstream replica and worker, and its database.
struct Upstream {
    db: TestDb,
    replica: Proc,
    _worker: Proc,
}

impl Upstream {
    async fn start() -> Self {
        let db = TestDb::new().await;
        let replica = Proc::serve_args(
            &db.url,
            &["serve", "--listen", "127.0.0.1:0", "--tools", "conformance"],
            &[("MCP_TASKS_LOG", "info,sqlx=warn,rmcp=warn")],
        )
        .await;
        let worker = Proc::worker(&db.url, "conformance", FAST_WORKER).await;
        Self {
            db,
            replica,
            _worker: worker,
        }
    }

    async fn tasks(&self, condition: &str) -> i64 {
        self.db.count_tasks(condition).await
    }
}

async fn setup(scratch: &Scratch, upstream: &Upstream) -> Fleet {
    let config = scratch.write(
        "config.toml",
        &format!(
            r#"
[[upstream]]
name = "ours"
url = "{}"
prefix = "up_"
tools = ["slow_compute", "confirm_delete"]
mode = "task-required"
idempotent = false
timeout_ms = 120000
"#,
            upstream.replica.url()
        ),
    );
    let fleet = Fleet::start(&config, 1).await;
    fleet.wait_reachable().await;
    fleet
}

#[tokio::test]
async fn a_2026_upstream_task_is_followed_answered_and_cancelled() {
    let upstream = Upstream::start().await;
    let scratch = Scratch::new();
    let fleet = setup(&scratch, &upstream).await;
    let client = fleet.client();

    // A slow tool: the upstream's own task, its status messages ours, its result ours.
    let id = start_task(
        &client,
        "up_slow_compute",
        json!({"seconds": 2, "label": "pi"}),
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the upstream's status relayed",
        || async {
            let task = client.get_task(&id).await.ok()?;
            task["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Computing pi"))
                .then_some(())
        },
    )
    .await;
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "Computed pi in 2 s.", "{done}");
    assert!(
        done["result"]
            .pointer("/_meta/io.modelcontextprotocol~1related-task")
            .is_none()
    );
    assert_eq!(
        upstream
            .tasks("status = 'completed' AND tool = 'slow_compute'")
            .await,
        1,
        "the upstream ran the call as a task of its own"
    );

    // A tool that asks for input: its inputRequests become ours, our tasks/update its.
    let id = start_task(&client, "up_confirm_delete", json!({"filename": "a.txt"})).await;
    let (task, key) = asked(&client, &id).await;
    assert_eq!(key, "confirm_delete", "{task}");
    assert_eq!(
        task["inputRequests"][&key]["params"]["message"], "Delete a.txt?",
        "{task}"
    );
    client
        .update_task(
            &id,
            json!({ key: {"action": "accept", "content": {"confirm": true}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "Deleted a.txt.", "{done}");
    assert_eq!(
        upstream
            .tasks("status = 'completed' AND tool = 'confirm_delete'")
            .await,
        1
    );

    // Cancelling ours cancels the upstream's.
    let id = start_task(&client, "up_slow_compute", json!({"seconds": 120})).await;
    eventually(
        Duration::from_secs(60),
        "the upstream's task runs",
        || async {
            let task = client.get_task(&id).await.ok()?;
            task["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Computing job"))
                .then_some(())
        },
    )
    .await;
    client.cancel_task(&id).await.expect("tasks/cancel");
    let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "cancelled", "{done}");
    eventually(
        Duration::from_secs(60),
        "the upstream's task cancelled",
        || async {
            (upstream
                .tasks("status = 'cancelled' AND tool = 'slow_compute'")
                .await
                == 1)
                .then_some(())
        },
    )
    .await;
}
