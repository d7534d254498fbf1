//! Real `mcp-tasks` processes, for tests that kill or restart them or run the CLI,
//! started through `mcp-tasks-spawn` (the spawner the harnesses share): from a scrubbed
//! environment (nothing from the test's own, an `MCP_TASKS_*` or `DATABASE_URL` of the
//! developer's shell, decides what a child does: only [`INHERITED`] and what the test
//! sets), ready once the child prints its ready line, killed when dropped. Their logs
//! go to the test's output (shown when a test fails).

use std::net::SocketAddr;
use std::process::Output;
use std::time::Duration;

pub(crate) use mcp_tasks_spawn::command;
use mcp_tasks_spawn::{Process, Spawn};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_mcp-tasks-under-test");

/// How long a child may take to print its ready line (a worker's comes once its
/// upstreams have answered or timed out).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// `mcp-tasks args…` with a scrubbed environment and `env` set.
pub(crate) fn mcp_tasks(args: &[&str], env: &[(&str, &str)]) -> Spawn {
    let mut spawn = Spawn::new(BIN);
    spawn.args(args).envs(env.iter().copied());
    spawn
}

/// Runs `spawn` to its exit, capturing stdout and stderr; fails the test if it has not
/// exited within `within` (and kills it).
pub(crate) async fn output(mut spawn: Spawn, within: Duration) -> Output {
    spawn.output(within).await.unwrap_or_else(|e| panic!("{e}"))
}

/// A running `mcp-tasks` process. Killed when dropped.
pub(crate) struct Proc {
    process: Process,
    pub(crate) addr: Option<SocketAddr>,
}

impl Proc {
    /// `mcp-tasks serve` on a free port; returns once it is listening.
    pub(crate) async fn serve(database_url: &str, tools: &str, extra_env: &[(&str, &str)]) -> Self {
        Self::serve_args(
            database_url,
            &["serve", "--listen", "127.0.0.1:0", "--tools", tools],
            extra_env,
        )
        .await
    }

    /// `mcp-tasks args…` that serves; returns once it is listening.
    pub(crate) async fn serve_args(
        database_url: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Self {
        let mut spawn = Self::spawn(BIN, "serve", database_url, args, extra_env);
        Self::start(&mut spawn).await
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
        let mut spawn = Self::spawn(
            "sh",
            &format!("serve(nofile {nofile})"),
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
        Self::start(&mut spawn).await
    }

    /// `mcp-tasks worker`; returns once it has loaded its tools.
    pub(crate) async fn worker(
        database_url: &str,
        tools: &str,
        extra_env: &[(&str, &str)],
    ) -> Self {
        let mut spawn = Self::spawn(
            BIN,
            "worker",
            database_url,
            &["worker", "--tools", tools],
            extra_env,
        );
        Self::start(&mut spawn).await
    }

    fn spawn(
        program: &str,
        name: &str,
        database_url: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Spawn {
        let mut spawn = Spawn::new(program);
        spawn
            .name(name)
            .args(args)
            .env("DATABASE_URL", database_url)
            .env("MCP_TASKS_LOG", "info,sqlx=warn")
            .envs(extra_env.iter().copied())
            .ready_within(READY_WITHIN);
        spawn
    }

    async fn start(spawn: &mut Spawn) -> Self {
        let process = spawn.start().await.unwrap_or_else(|e| panic!("{e}"));
        Self {
            addr: process.listen(),
            process,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr.expect("not a replica"))
    }

    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.process.pid()).unwrap_or_default()
    }

    /// What its ready line said.
    pub(crate) fn ready(&self) -> &mcp_tasks_spawn::Ready {
        self.process.ready().expect("started with its ready line")
    }

    /// SIGKILL: no chance to clean up, as in a crash.
    pub(crate) async fn kill(mut self) {
        self.process.kill().await;
    }

    /// SIGTERM, then waits for the process to exit; returns whether it exited cleanly.
    pub(crate) async fn terminate(mut self, within: Duration) -> bool {
        self.process
            .terminate(within)
            .await
            .is_some_and(|status| status.success())
    }
}
