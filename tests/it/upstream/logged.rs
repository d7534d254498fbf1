//! `mcp-tasks serve` and `worker` processes whose log the test can read (as well as see in
//! its output): what an upstream test checks is often what was logged, and what was not
//! said to the caller. Started through the shared spawner, like `harness::procs::Proc`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcp_tasks_spawn::{Logs, Process, Spawn};

use crate::harness::procs;

/// How long a child may take to print its ready line.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A running `mcp-tasks` process and every line it has logged. Killed when dropped.
pub(super) struct Logged {
    process: Process,
    pub(super) addr: Option<SocketAddr>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    /// `mcp-tasks args…` that serves; returns once it is listening.
    pub(super) async fn serve(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start("serve", database_url, args, env).await
    }

    /// `mcp-tasks worker --tools TOOLS`; returns once it has loaded its tools.
    pub(super) async fn worker(database_url: &str, tools: &str, env: &[(&str, &str)]) -> Self {
        Self::start("worker", database_url, &["worker", "--tools", tools], env).await
    }

    /// `mcp-tasks args…` named `name` in the output; returns once it is ready.
    pub(super) async fn start(
        name: &str,
        database_url: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let mut spawn = Spawn::new(procs::BIN);
        spawn
            .name(name)
            .args(args)
            .env("DATABASE_URL", database_url)
            .env("MCP_TASKS_LOG", "info,sqlx=warn")
            .envs(env.iter().copied())
            .ready_within(READY_WITHIN)
            .logs(Logs::To(Arc::new(move |name: &str, line: &str| {
                eprintln!("{name}: {line}");
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line.to_owned());
            })));
        let process = spawn.start().await.unwrap_or_else(|e| panic!("{e}"));
        Self {
            addr: process.listen(),
            process,
            lines,
        }
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr.expect("not a replica"))
    }

    pub(super) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Every line logged so far.
    pub(super) fn log(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The lines logged so far that contain `needle`.
    pub(super) fn logged(&self, needle: &str) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|l| l.contains(needle))
            .collect()
    }

    /// SIGKILL: no chance to clean up, as in a crash.
    pub(super) async fn kill(mut self) {
        self.process.kill().await;
    }
}
