//! Real `mcp-tasks` processes, for tests that kill or restart them.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_mcp-tasks-under-test");

/// A running `mcp-tasks` process. Killed when dropped.
pub(crate) struct Proc {
    child: Child,
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) name: String,
}

impl Proc {
    /// `mcp-tasks serve` on a free port; returns once it is listening.
    pub(crate) async fn serve(database_url: &str, tools: &str, extra_env: &[(&str, &str)]) -> Self {
        let p = Self::spawn(
            "serve",
            database_url,
            &["serve", "--listen", "127.0.0.1:0", "--tools", tools],
            extra_env,
        );
        p.listening().await
    }

    /// `mcp-tasks serve` with its soft open-file limit lowered to `nofile` (by the shell's
    /// `ulimit`: lowering a limit needs no privilege).
    pub(crate) async fn serve_with_file_limit(
        database_url: &str,
        tools: &str,
        extra_env: &[(&str, &str)],
        nofile: u64,
    ) -> Self {
        let limit = nofile.to_string();
        let mut p = Self::spawn_program(
            "sh",
            "serve",
            database_url,
            &[
                "-c",
                r#"ulimit -S -n "$0" && exec "$@""#,
                &limit,
                BIN,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tools",
                tools,
            ],
            extra_env,
        );
        p.name = format!("serve(nofile {nofile})");
        p.listening().await
    }

    async fn listening(mut self) -> Self {
        let (tx, rx) = oneshot::channel();
        self.forward_logs(Some(tx));
        let addr = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("replica did not start listening within 30 s")
            .expect("replica exited before listening");
        self.addr = Some(addr);
        self
    }

    /// `mcp-tasks worker`.
    pub(crate) fn worker(database_url: &str, tools: &str, extra_env: &[(&str, &str)]) -> Self {
        let mut p = Self::spawn(
            "worker",
            database_url,
            &["worker", "--tools", tools],
            extra_env,
        );
        p.forward_logs(None);
        p
    }

    fn spawn(name: &str, database_url: &str, args: &[&str], extra_env: &[(&str, &str)]) -> Self {
        Self::spawn_program(BIN, name, database_url, args, extra_env)
    }

    fn spawn_program(
        program: &str,
        name: &str,
        database_url: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("DATABASE_URL", database_url)
            .env("MCP_TASKS_LOG", "info,sqlx=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawning mcp-tasks");
        Self {
            child,
            addr: None,
            name: name.to_owned(),
        }
    }

    /// Copies the process's log to the test's output (shown when a test fails), and
    /// reports the address once the replica logs it.
    fn forward_logs(&mut self, mut listening: Option<oneshot::Sender<SocketAddr>>) {
        let Some(stderr) = self.child.stderr.take() else {
            return;
        };
        let name = format!("{}[{}]", self.name, self.child.id().unwrap_or(0));
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{name}: {line}");
                if let Some(rest) = line.split("listening on http://").nth(1)
                    && let Some(addr) = rest.split("/mcp").next().and_then(|a| a.parse().ok())
                    && let Some(tx) = listening.take()
                {
                    let _ = tx.send(addr);
                }
            }
        });
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr.expect("not a replica"))
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id().map_or(0, |p| p as i32)
    }

    /// SIGKILL: no chance to clean up, as in a crash.
    pub(crate) async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then waits for the process to exit; returns whether it exited cleanly.
    pub(crate) async fn terminate(mut self, within: Duration) -> bool {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        );
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(Ok(status)) => status.success(),
            _ => false,
        }
    }
}
