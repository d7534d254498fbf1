//! Workers with different tool sets share one queue: each claims only tasks whose tool
//! it has, so none fails for lack of a tool, and a task no live worker can run waits.

use std::time::Duration;

use serde_json::json;

use super::{FAST_WORKER, Scratch, everything_argv, start_task, toml_list, wait_terminal};
use crate::harness::procs::Proc;
use crate::harness::{Need, TestDb, skip, status};

#[tokio::test]
async fn two_workers_with_different_tools_each_run_their_own() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let db = TestDb::new().await;
    let scratch = Scratch::new();
    let argv = toml_list(&everything_argv("stdio").await);
    let config = scratch.write(
        "config.toml",
        &format!(
            "[[upstream]]\nname = \"everything\"\ncommand = {argv}\nprefix = \"ev_\"\ntools = [\"echo\"]\nmode = \"task-required\"\n"
        ),
    );
    // The replica serves both sets; each worker has one.
    let replica = Proc::serve_args(
        &db.url,
        &["serve", "--listen", "127.0.0.1:0", "--tools", "conformance"],
        &[("MCP_TASKS_CONFIG", &config)],
    )
    .await;
    let client = mcp_tasks_client::Client::with_tasks(replica.url());

    // Only the built-in worker at first: the upstream's tasks wait, never fail.
    let builtin = Proc::worker(&db.url, "conformance", FAST_WORKER).await;
    let mut echoes = Vec::new();
    let mut computes = Vec::new();
    for i in 0..6 {
        echoes.push(start_task(&client, "ev_echo", json!({"message": format!("m{i}")})).await);
        computes.push(start_task(&client, "slow_compute", json!({"seconds": 0})).await);
    }
    for id in &computes {
        let done = wait_terminal(&client, id, Duration::from_secs(30)).await;
        assert_eq!(status(&done), "completed", "{done}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in &echoes {
        let task = client.get_task(id).await.expect("tasks/get");
        assert_eq!(status(&task), "working", "queued, not failed: {task}");
    }
    let queued: i64 = db
        .count_tasks("tool = 'ev_echo' AND status = 'working' AND attempt = 0")
        .await;
    assert_eq!(queued, 6, "never claimed by a worker without the tool");
    // What workers log about such tasks: the queue by tool.
    let waiting = db
        .store
        .worker()
        .waiting_by_tool(1000, 100)
        .await
        .expect("queue");
    assert_eq!(waiting, [("ev_echo".to_owned(), 6)], "{waiting:?}");

    // A worker with the upstream arrives: the waiting tasks run there.
    let mut env = FAST_WORKER.to_vec();
    env.push(("MCP_TASKS_CONFIG", &config));
    let upstream = Proc::worker(&db.url, "none", &env).await;
    for (i, id) in echoes.iter().enumerate() {
        let done = wait_terminal(&client, id, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "completed", "{done}");
        assert!(
            super::text_of(&done["result"]).contains(&format!("m{i}")),
            "{done}"
        );
    }
    // Both kinds again, with both workers up: every one completes, none fails.
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(start_task(&client, "ev_echo", json!({"message": format!("again{i}")})).await);
        ids.push(start_task(&client, "slow_compute", json!({"seconds": 0})).await);
    }
    for id in &ids {
        let done = wait_terminal(&client, id, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "completed", "{done}");
    }
    assert_eq!(db.count_tasks("status = 'failed'").await, 0);
    drop((builtin, upstream));
}
