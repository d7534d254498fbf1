//! `mcp-tasks serve` and `worker` processes whose log the test can read (as well as see in
//! its output): what an upstream test checks is often what was logged, and what was not
//! said to the caller. Started like `harness::procs::Proc`, from a scrubbed environment.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use crate::harness::procs;

/// A running `mcp-tasks` process and every line it has logged. Killed when dropped.
pub(super) struct Logged {
    child: Child,
    pub(super) addr: Option<SocketAddr>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    /// `mcp-tasks args…` that serves; returns once it is listening.
    pub(super) async fn serve(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let (tx, rx) = oneshot::channel();
        let mut p = Self::spawn("serve", database_url, args, env, Some(tx));
        let addr = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("replica did not start listening within 30 s")
            .expect("replica exited before listening");
        p.addr = Some(addr);
        p
    }

    /// `mcp-tasks worker --tools TOOLS`.
    pub(super) fn worker(database_url: &str, tools: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn(
            "worker",
            database_url,
            &["worker", "--tools", tools],
            env,
            None,
        )
    }

    fn spawn(
        name: &str,
        database_url: &str,
        args: &[&str],
        env: &[(&str, &str)],
        mut listening: Option<oneshot::Sender<SocketAddr>>,
    ) -> Self {
        let mut cmd = Command::from(procs::command(procs::BIN));
        cmd.args(args)
            .env("DATABASE_URL", database_url)
            .env("MCP_TASKS_LOG", "info,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawning mcp-tasks");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let label = format!("{name}[{}]", child.id().unwrap_or(0));
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                eprintln!("{label}: {line}");
                if let Some(addr) = procs::listening_address(&line)
                    && let Some(tx) = listening.take()
                {
                    let _ = tx.send(addr);
                }
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
        });
        Self {
            child,
            addr: None,
            lines,
        }
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr.expect("not a replica"))
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
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
        let _ = self.child.kill().await;
    }
}
