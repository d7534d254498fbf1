//! Real `mcp-tasks` processes, for tests that kill or restart them or run the CLI. Every
//! child starts from a scrubbed environment: nothing from the test's own (an
//! `MCP_TASKS_*` or `DATABASE_URL` of the developer's shell) decides what it does, only
//! [`INHERITED`] and what the test sets.

use std::net::SocketAddr;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_mcp-tasks-under-test");

/// What a child keeps of the test's environment: where programs and the home directory
/// are, the temporary directory, and whether to print backtraces.
pub(crate) const INHERITED: &[&str] = &["PATH", "HOME", "TMPDIR", "RUST_BACKTRACE"];

/// `program` with a scrubbed environment ([`INHERITED`] and `NO_COLOR=1`), no stdin.
pub(crate) fn command(program: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.env_clear().env("NO_COLOR", "1").stdin(Stdio::null());
    for name in INHERITED {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd
}

/// `mcp-tasks args…` with a scrubbed environment and `env` set.
pub(crate) fn mcp_tasks(args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = command(BIN);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `cmd` to its exit, capturing stdout and stderr; fails the test if it has not
/// exited within `within` (and kills it).
pub(crate) async fn output(cmd: std::process::Command, within: Duration) -> Output {
    let mut cmd = Command::from(cmd);
    cmd.kill_on_drop(true);
    tokio::time::timeout(within, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("the process did not exit within {within:?}"))
        .expect("running the binary")
}

/// The address in a replica's start-up line (`… listening on http://ADDR/mcp`).
pub(crate) fn listening_address(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split("/mcp").next().and_then(|a| a.parse().ok())
}

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

    /// `mcp-tasks args…` that serves; returns once it is listening.
    pub(crate) async fn serve_args(
        database_url: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Self {
        Self::spawn("serve", database_url, args, extra_env)
            .listening()
            .await
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
        let mut cmd = Command::from(command(program));
        cmd.args(args)
            .env("DATABASE_URL", database_url)
            .env("MCP_TASKS_LOG", "info,sqlx=warn")
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
                if let Some(addr) = listening_address(&line)
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

#[tokio::test]
async fn children_see_only_the_inherited_variables_and_what_the_test_sets() {
    let mut env = command("env");
    env.env("MCP_TASKS_SET_BY_THE_TEST", "1");
    let out = output(env, Duration::from_secs(30)).await;
    assert!(out.status.success(), "{out:?}");
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.to_owned()))
        .collect();
    assert!(
        names.contains(&"MCP_TASKS_SET_BY_THE_TEST".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"NO_COLOR".to_owned()), "{names:?}");
    for name in &names {
        assert!(
            INHERITED.contains(&name.as_str())
                || name == "NO_COLOR"
                || name == "MCP_TASKS_SET_BY_THE_TEST",
            "{name} reached a child from the test's environment: {names:?}"
        );
    }
}
