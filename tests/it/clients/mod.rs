//! Real MCP client libraries against the service: the TypeScript SDK
//! (`@modelcontextprotocol/sdk` 1.x, npm) and the Python SDK (`mcp` 1.x, PyPI), pinned in
//! `tests/clients/` and installed on demand by `tests/clients/setup` into a cache under
//! `~/.cache`. Each drives two replicas and a worker through a round-robin proxy, so the
//! requests of one session (and the answer to an elicitation, and the stream waiting for
//! it) land on different replicas.
//!
//! The client programs (`tests/clients/ts/client.cjs`, `tests/clients/py/client.py`)
//! only report, one JSON line per step, what the library returned; the tests here decide.

mod proxy;
mod py;
mod ts;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{self, Replica, TestDb, Worker, registry};
use proxy::{Hop, Proxy};

/// The folder holding `tests/clients/`.
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// The installed libraries (`<cache>/ts/node_modules`, `<cache>/py`). A test calls it
/// after `skip(Need::ClientLibraries)`, which found them.
async fn installed() -> PathBuf {
    harness::installed("clients/setup")
        .await
        .unwrap_or_else(|why| panic!("the client libraries: {why}"))
}

/// Two replicas sharing one state key and one database, a worker, and the proxy.
struct Fleet {
    db: TestDb,
    replicas: Vec<Replica>,
    worker: Worker,
    proxy: Proxy,
}

impl Fleet {
    async fn start() -> Self {
        let db = TestDb::new().await;
        let packs = "demo,conformance";
        let mut replicas = Vec::new();
        for _ in 0..2 {
            replicas.push(Replica::start(&db.store, registry(packs)).await);
        }
        let worker = Worker::start(&db.store, registry(packs));
        let proxy = Proxy::start(replicas.iter().map(|r| r.url.clone()).collect()).await;
        Self {
            db,
            replicas,
            worker,
            proxy,
        }
    }

    async fn stop(self) {
        self.proxy.stop();
        self.worker.stop().await;
        for r in self.replicas {
            r.stop().await;
        }
        drop(self.db);
    }
}

/// What a client program reported, by step.
struct Report {
    steps: HashMap<String, Value>,
    output: String,
}

impl Report {
    fn step(&self, name: &str) -> &Value {
        self.steps
            .get(name)
            .unwrap_or_else(|| panic!("the client reported no {name:?} step:\n{}", self.output))
    }
}

/// Runs a client program to its end and collects its report; any failure of the program
/// fails the test with everything it printed.
async fn run_client(mut command: tokio::process::Command) -> Report {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().expect("spawning the client program");
    let out = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("the client program did not finish within 180 s")
        .expect("waiting for the client program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let output = format!(
        "--- stdout\n{stdout}--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut steps = HashMap::new();
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(step) = v["step"].as_str() {
            steps.insert(step.to_owned(), v.clone());
        }
    }
    assert!(
        out.status.success() && !steps.contains_key("error"),
        "the client program failed:\n{output}"
    );
    Report { steps, output }
}

/// The hop of the first `tools/call` of `tool` at or after `from`, and the first client
/// response after it.
fn call_and_answer(hops: &[Hop], tool: &str, from: usize) -> (usize, usize) {
    let call = hops[from..]
        .iter()
        .position(|h| h.rpc == "tools/call" && h.name == tool)
        .map(|i| i + from)
        .unwrap_or_else(|| panic!("no tools/call of {tool} in {hops:#?}"));
    let answer = hops[call..]
        .iter()
        .position(|h| h.rpc == "response")
        .map(|i| i + call)
        .unwrap_or_else(|| panic!("no response after the tools/call of {tool} in {hops:#?}"));
    (call, answer)
}

/// Both replicas served POSTs of the session.
fn assert_spread(hops: &[Hop]) {
    for backend in 0..2 {
        assert!(
            hops.iter()
                .any(|h| h.backend == backend && h.http_method == "POST"),
            "replica {backend} served no request: {hops:#?}"
        );
    }
}

/// Text lines of a progress report.
fn messages(progress: &Value) -> Vec<String> {
    progress
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|e| e["message"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Progress values only grow.
fn assert_increasing(progress: &Value) {
    let values: Vec<f64> = progress
        .as_array()
        .map(|p| p.iter().filter_map(|e| e["progress"].as_f64()).collect())
        .unwrap_or_default();
    assert!(!values.is_empty(), "no progress: {progress}");
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress must increase: {values:?}"
    );
}
