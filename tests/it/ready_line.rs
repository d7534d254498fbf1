//! The ready line (`--ready-line`, `MCP_TASKS_READY_LINE`): one JSON line on stdout once
//! `serve`, `worker` or `dev` is up, saying where it listens; what the harnesses wait
//! for instead of reading log text. Without it, nothing goes to stdout. Also: a process
//! runs on as many threads as `MCP_TASKS_THREADS` says.

use std::time::Duration;

use crate::harness::TestDb;
use crate::harness::procs::{self, BIN, Proc};

async fn get_status(url: &str) -> u16 {
    reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_worker_and_dev_say_where_they_listen_on_their_ready_line() {
    let db = TestDb::new().await;
    let metrics_any_port = [("MCP_TASKS_METRICS_LISTEN", "127.0.0.1:0")];

    let replica = Proc::serve(&db.url, "conformance", &metrics_any_port).await;
    let ready = replica.ready().clone();
    assert_eq!(ready.role, "replica", "{ready:?}");
    let listen = ready.listen.expect("a replica's address");
    assert_ne!(listen.port(), 0, "the port it took, not the one asked for");
    assert_eq!(ready.url.as_deref(), Some(&*format!("http://{listen}/mcp")));
    assert_eq!(get_status(&format!("http://{listen}/healthz")).await, 200);
    let metrics = ready.metrics.expect("the metrics listener it was given");
    assert_ne!(metrics.port(), 0);
    assert_eq!(get_status(&format!("http://{metrics}/metrics")).await, 200);

    let worker = Proc::worker(
        &db.url,
        "conformance",
        &[
            ("MCP_TASKS_WORKER_ID", "ready-line-worker"),
            metrics_any_port[0],
        ],
    )
    .await;
    let ready = worker.ready().clone();
    assert_eq!(ready.role, "worker", "{ready:?}");
    assert_eq!(ready.worker_id.as_deref(), Some("ready-line-worker"));
    assert_eq!(ready.listen, None, "{ready:?}");
    let metrics = ready.metrics.expect("the worker's metrics listener");
    assert_eq!(get_status(&format!("http://{metrics}/metrics")).await, 200);
    // Without a metrics listener, the worker's line says so.
    let bare = Proc::worker(&db.url, "conformance", &[]).await;
    assert_eq!(bare.ready().metrics, None, "{:?}", bare.ready());

    let dev = Proc::serve_args(
        &db.url,
        &["dev", "--listen", "127.0.0.1:0", "--tools", "conformance"],
        &[],
    )
    .await;
    let ready = dev.ready().clone();
    assert_eq!(ready.role, "dev", "{ready:?}");
    let listen = ready.listen.expect("dev's address");
    assert_eq!(get_status(&format!("http://{listen}/readyz")).await, 200);
    assert_eq!(ready.metrics, None, "{ready:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_nothing_goes_to_stdout() {
    let db = TestDb::new().await;
    // The replica runs until its log says it listens (or 60 s pass), then is stopped: its
    // stdout is what it printed by then.
    let script = r#"
        log=$(mktemp)
        "$0" serve --listen 127.0.0.1:0 --tools conformance 2>"$log" & pid=$!
        for _ in $(seq 600); do grep -q "listening on" "$log" && break; sleep 0.1; done
        kill -TERM "$pid"; wait "$pid"
        cat "$log" >&2; rm -f "$log"
    "#;
    let out = procs::output(
        {
            let mut spawn = mcp_tasks_spawn::Spawn::new("sh");
            spawn
                .args(["-c", script, BIN])
                .env("DATABASE_URL", &db.url)
                .env("MCP_TASKS_LOG", "info,sqlx=warn");
            spawn
        },
        Duration::from_secs(120),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("listening on"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The runtime's worker threads (named `tokio-rt-worker`) in process `pid`.
fn runtime_threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process's threads")
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|name| name.trim_end() == "tokio-rt-worker")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_runs_on_the_threads_it_is_given_and_refuses_none() {
    let db = TestDb::new().await;
    for (threads, expected) in [("1", 1), ("3", 3)] {
        let replica = Proc::serve(&db.url, "conformance", &[("MCP_TASKS_THREADS", threads)]).await;
        assert_eq!(
            get_status(&replica.url().replace("/mcp", "/healthz")).await,
            200
        );
        assert_eq!(
            runtime_threads(replica.pid()),
            expected,
            "MCP_TASKS_THREADS={threads}"
        );
    }
    let refused = procs::output(
        procs::mcp_tasks(&["serve", "--threads", "0"], &[("DATABASE_URL", &db.url)]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--threads"),
        "{refused:?}"
    );
}
