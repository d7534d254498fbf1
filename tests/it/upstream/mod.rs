//! Upstream MCP servers behind mcp-tasks, through the configuration file, with servers
//! nobody here wrote: `@modelcontextprotocol/server-everything` (npm) over stdio and over
//! Streamable HTTP, and a FastMCP (PyPI) server written in the test. `tests/upstreams/setup`
//! installs them (pinned) into a cache under `~/.cache`. Every process is real: a replica
//! and workers started with `--config`, killed where a test says so.

mod bounds;
mod everything;
mod everything_input;
mod fastmcp;
mod fastmcp_input;
mod isolation;
mod logged;
#[path = "../../../crates/wire/tests/official/mod.rs"]
mod official;
mod reports;
mod routing;
mod tasks_2026;

use std::path::PathBuf;
use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::Value;

use crate::harness::{self, TestDb};
use logged::Logged;

/// The installed servers' folder (`node_modules/`, `py/`). A test calls it after
/// `skip(Need::UpstreamServers)`, which found them.
async fn installed() -> PathBuf {
    harness::installed("upstreams/setup")
        .await
        .unwrap_or_else(|why| panic!("the upstream servers: {why}"))
}

/// `node <server-everything> <mode>` as an argv for the configuration file.
async fn everything_argv(mode: &str) -> Vec<String> {
    let entry = installed()
        .await
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    vec!["node".into(), entry.display().to_string(), mode.into()]
}

/// `tests/upstreams/probe.py`, a FastMCP server made for the hardening tests, with `args`,
/// as an argv for the configuration file.
async fn probe_argv(args: &[&str]) -> Vec<String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("upstreams/probe.py");
    let mut argv = vec![python().await, script.display().to_string()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv
}

async fn python() -> String {
    installed()
        .await
        .join("py/bin/python")
        .display()
        .to_string()
}

/// A scratch folder for one test (configuration files, markers the servers write).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "mcp-tasks-upstream-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("writing a scratch file");
        path.display().to_string()
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// TOML for a string list.
fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Quick leases so a killed worker's task is taken over within seconds.
const FAST_WORKER: &[(&str, &str)] = &[
    ("MCP_TASKS_LEASE_MS", "1500"),
    ("MCP_TASKS_POLL_MS", "200"),
    // Often, so that `wait_reachable` soon sees the tools a worker has.
    ("MCP_TASKS_PRESENCE_MS", "300"),
    (
        "MCP_TASKS_LOG",
        "info,sqlx=warn,rmcp=warn,mcp_tasks_upstream=debug",
    ),
];

/// A replica and `workers` workers on a fresh database, all with configuration `config`.
struct Fleet {
    db: TestDb,
    replica: Logged,
    workers: Vec<Logged>,
    config: String,
    /// What every process gets besides the configuration (see [`Setup`]).
    setup: Setup,
}

/// More for a fleet's processes than the configuration file.
#[derive(Clone, Default)]
struct Setup {
    /// Arguments of the replica's `serve` (after `--listen`, `--tools`).
    serve_args: Vec<String>,
    /// The replica's `--listen` (default `127.0.0.1:0`).
    listen: Option<String>,
    /// The replica's built-in `--tools` (default `none`; workers have none).
    tools: Option<String>,
    /// Environment of the replica and of every worker.
    env: Vec<(String, String)>,
}

impl Fleet {
    async fn start(config: &str, workers: usize) -> Self {
        Self::launch(config, workers, Setup::default()).await
    }

    async fn launch(config: &str, workers: usize, setup: Setup) -> Self {
        let db = TestDb::new().await;
        let replica = Self::replica(&db, config, &setup).await;
        let mut fleet = Self {
            db,
            replica,
            workers: Vec::new(),
            config: config.to_owned(),
            setup,
        };
        for _ in 0..workers {
            fleet.add_worker().await;
        }
        fleet
    }

    async fn replica(db: &TestDb, config: &str, setup: &Setup) -> Logged {
        let listen = setup.listen.as_deref().unwrap_or("127.0.0.1:0");
        let tools = setup.tools.as_deref().unwrap_or("none");
        let mut args = vec!["serve", "--listen", listen, "--tools", tools];
        args.extend(setup.serve_args.iter().map(String::as_str));
        let mut env = vec![
            ("MCP_TASKS_CONFIG", config),
            ("MCP_TASKS_LOG", "info,sqlx=warn,rmcp=warn"),
        ];
        env.extend(setup.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Logged::serve(&db.url, &args, &env).await
    }

    /// Waits until the replica and every worker reach every upstream (a Python upstream
    /// may take longer to start than they wait at start-up; its tools appear when it
    /// answers). A worker says which tools it has in its row of the `workers` table.
    async fn wait_reachable(&self) {
        let url = self.replica.url().replace("/mcp", "/readyz");
        let tools = crate::harness::eventually(
            Duration::from_secs(120),
            "every upstream reachable from the replica",
            || async {
                let ready: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
                let all = ready["upstreams"].as_array()?;
                all.iter()
                    .all(|u| u["reachable"] == true)
                    .then(|| all.iter().filter_map(|u| u["tools"].as_i64()).sum::<i64>())
            },
        )
        .await;
        let workers = i64::try_from(self.workers.len()).expect("worker count");
        crate::harness::eventually(
            Duration::from_secs(120),
            "every upstream reachable from every worker",
            || async {
                let ready: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM workers
                      WHERE cardinality(tools) >= $1
                        AND last_seen_at > now() - interval '3 seconds'",
                )
                .bind(tools)
                .fetch_one(&self.db.pool)
                .await
                .ok()?;
                (ready >= workers).then_some(())
            },
        )
        .await;
    }

    /// Another replica on the same database and configuration.
    async fn add_replica(&self) -> Logged {
        let setup = Setup {
            listen: None,
            ..self.setup.clone()
        };
        Self::replica(&self.db, &self.config, &setup).await
    }

    async fn add_worker(&mut self) {
        let mut env = FAST_WORKER.to_vec();
        env.push(("MCP_TASKS_CONFIG", &self.config));
        env.extend(self.setup.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        self.workers
            .push(Logged::worker(&self.db.url, "none", &env).await);
    }

    fn client(&self) -> Client {
        Client::with_tasks(self.replica.url())
    }

    /// A client without the Tasks extension: task-optional tools answer synchronously.
    fn plain_client(&self) -> Client {
        Client::new(self.replica.url(), serde_json::json!({}))
    }
}

/// Creates a task for `tool` and returns its id.
async fn start_task(client: &Client, tool: &str, arguments: Value) -> String {
    let created = client
        .call_tool(tool, arguments)
        .await
        .unwrap_or_else(|e| panic!("calling {tool}: {e}"));
    assert_eq!(created["resultType"], "task", "{tool}: {created}");
    crate::harness::task_id(&created)
}

async fn wait_terminal(client: &Client, id: &str, within: Duration) -> Value {
    client
        .wait_terminal(id, within)
        .await
        .unwrap_or_else(|e| panic!("task {id}: {e}"))
}

/// The concatenated text of a `CallToolResult`.
fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
