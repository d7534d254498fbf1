//! The test app: fresh databases, in-process replicas and workers built from the real
//! crates (and [`TestApp`], which brings up several of them on one database), one HTTP
//! helper for raw requests ([`http`]: reqwest, bare TCP, the router in process, SSE), one
//! helper for real `mcp-tasks` processes with a scrubbed environment ([`procs`]), on-demand
//! installs of third-party programs ([`installed`]) and the skips of the test groups that
//! need them when they are missing ([`optional`]), and fixture builders for the usual
//! set-ups ([`fixtures`], [`jwt`]).

pub(crate) mod app;
mod container;
pub(crate) mod db;
pub(crate) mod fixtures;
pub(crate) mod http;
pub(crate) mod install;
pub(crate) mod jwt;
pub(crate) mod oauth_as;
pub(crate) mod optional;
pub(crate) mod procs;
pub(crate) mod relay;
pub(crate) mod replica;
pub(crate) mod spec;
pub(crate) mod suite_servers;

use std::time::Duration;

use mcp_tasks_server::ServerConfig;
use mcp_tasks_tools::Registry;
use mcp_tasks_wire::results::Implementation;
use mcp_tasks_worker::WorkerConfig;
use serde_json::Value;

pub(crate) use app::TestApp;
pub(crate) use db::TestDb;
pub(crate) use install::installed;
pub(crate) use optional::{Need, skip};
pub(crate) use replica::{Replica, Worker};

pub(crate) fn server_info() -> Implementation {
    Implementation {
        name: "mcp-tasks-test".into(),
        version: "0.0.0".into(),
    }
}

pub(crate) fn registry(packs: &str) -> Registry {
    Registry::from_packs(packs).expect("packs")
}

pub(crate) fn server_config() -> ServerConfig {
    let mut c = ServerConfig::new(server_info());
    c.sync_wait = Duration::from_secs(20);
    // Tests fire requests as fast as they can; the limit has tests of its own.
    c.rate_limit = None;
    c
}

pub(crate) fn worker_config() -> WorkerConfig {
    let mut c = WorkerConfig::new(server_info());
    c.concurrency = 8;
    c.lease = Duration::from_secs(3);
    c.poll_interval = Duration::from_millis(100);
    c.maintenance_interval = Duration::from_millis(200);
    c.shutdown_grace = Duration::from_secs(5);
    c.cancel_grace = Duration::from_secs(2);
    // So that a worker that died reads as gone within a few seconds.
    c.presence_interval = Duration::from_millis(500);
    c
}

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub(crate) async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Reads a listen stream to its end (the result frame), within `within` a frame; the last
/// status its notifications carried.
pub(crate) async fn last_status(
    stream: &mut mcp_tasks_client::Subscription,
    within: Duration,
) -> Option<String> {
    let mut last = None;
    while let Some(frame) = tokio::time::timeout(within, stream.next())
        .await
        .expect("a frame in time")
        .expect("a frame")
    {
        if let Some(status) = frame["params"]["status"].as_str() {
            last = Some(status.to_owned());
        }
        if frame.get("result").is_some() {
            break;
        }
    }
    last
}

pub(crate) fn status(task: &Value) -> &str {
    mcp_tasks_client::status_of(task)
}

pub(crate) fn task_id(created: &Value) -> String {
    created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no taskId in {created}"))
        .to_owned()
}

/// A line on the test process's real stderr, past the test harness's output capture: which
/// database a run used must show even when every test passes.
pub(crate) fn announce(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
