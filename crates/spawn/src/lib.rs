//! Starting `mcp-tasks` processes for the harnesses (the integration tests, `mcp-tasks
//! chaos`, `mcp-tasks bench`), one way for all of them:
//!
//! - **a scrubbed environment**: a child keeps only [`INHERITED`] of ours, so nothing in
//!   the caller's shell (an `MCP_TASKS_*`, a `DATABASE_URL`) decides what it does; what it
//!   needs is set on the [`Spawn`];
//! - **the ready line**: asked with `MCP_TASKS_READY_LINE`, `serve`, `worker` and `dev`
//!   print one JSON line on stdout once they are up ([`Ready`]: where they listen);
//!   [`Spawn::ready_within`] waits for it, so nobody reads log text for an address;
//! - **logs**: stderr is read line by line as [`Logs`] says (all forwarded, only problems,
//!   or handed to a function that counts them), so the pipe never fills;
//! - **killed on drop**, and [`Process::kill`] / [`Process::terminate`] to end it sooner
//!   (a crash, an operator's SIGTERM); CPU time and resident memory for the benchmarks.
//!
//! Only the harnesses depend on this crate (the serving binary has it only with the
//! `harness` feature, as bench and chaos).

mod logs;
mod process;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinSet;

pub use crate::logs::{LineSink, Logs, level};
pub use crate::process::Process;

/// What a child keeps of our environment: where programs and the home directory are, the
/// temporary directory, and whether to print backtraces.
pub const INHERITED: &[&str] = &["PATH", "HOME", "TMPDIR", "RUST_BACKTRACE"];

/// The variable that asks `serve`, `worker` and `dev` for their ready line
/// (`--ready-line`).
pub const READY_LINE_ENV: &str = "MCP_TASKS_READY_LINE";

/// `program` with a scrubbed environment ([`INHERITED`] and `NO_COLOR=1`) and no stdin:
/// for what runs a child another way (in a pseudo-terminal, say).
pub fn command(program: impl AsRef<OsStr>) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.env_clear().env("NO_COLOR", "1").stdin(Stdio::null());
    for name in INHERITED {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd
}

/// What a process says on its ready line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Ready {
    /// `replica`, `worker` or `dev`.
    #[serde(rename = "ready")]
    pub role: String,
    /// The address a replica (or `dev`) listens on.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Its MCP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Its metrics listener, when it has one of its own.
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
    /// A worker's id (the owner of the leases it holds).
    #[serde(default)]
    pub worker_id: Option<String>,
}

impl Ready {
    /// The ready line's fields, or `None` when `line` is not one.
    pub fn parse(line: &str) -> Option<Self> {
        serde_json::from_str(line.trim()).ok()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting {name}")]
    Spawn {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{name} exited before it was ready ({status})")]
    ExitedBeforeReady { name: String, status: String },
    #[error(
        "{name} printed no ready line within {within:?} (serve, worker and dev print one when MCP_TASKS_READY_LINE is set)"
    )]
    NotReady { name: String, within: Duration },
    #[error("{name} did not exit within {within:?}")]
    DidNotExit { name: String, within: Duration },
}

/// How to start one child: the command (scrubbed), what to do with its log, and whether
/// to wait for its ready line. Start it as often as needed; each start is a new process.
#[derive(Debug)]
pub struct Spawn {
    command: tokio::process::Command,
    name: String,
    logs: Logs,
    ready: Option<Duration>,
}

impl Spawn {
    /// `program` (an `mcp-tasks` executable, or a shell that execs one) with a scrubbed
    /// environment; its log forwarded ([`Logs::All`]); no ready line awaited.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        let program = program.as_ref();
        let name = std::path::Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy()
            .into_owned();
        let mut command = tokio::process::Command::from(command(program));
        command.kill_on_drop(true);
        Self {
            command,
            name,
            logs: Logs::All,
            ready: None,
        }
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.command.arg(arg);
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.command.env(key, value);
        self
    }

    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.command.envs(vars);
        self
    }

    /// The name its log lines and errors carry (default: the program's file name).
    pub fn name(&mut self, name: impl Into<String>) -> &mut Self {
        self.name = name.into();
        self
    }

    pub fn logs(&mut self, logs: Logs) -> &mut Self {
        self.logs = logs;
        self
    }

    /// [`Spawn::start`] returns once the process has printed its ready line (asked for
    /// with [`READY_LINE_ENV`]), and fails if it has not within `within` or exits first.
    pub fn ready_within(&mut self, within: Duration) -> &mut Self {
        self.ready = Some(within);
        self
    }

    /// The command itself, for what the options here do not cover (a working directory).
    pub fn command(&mut self) -> &mut tokio::process::Command {
        &mut self.command
    }

    /// Starts the process (and, if asked, waits for its ready line).
    pub async fn start(&mut self) -> Result<Process, Error> {
        let wait = self.ready;
        if wait.is_some() {
            self.command.env(READY_LINE_ENV, "true");
        }
        self.command
            .stdout(if wait.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(match self.logs {
                Logs::Discard => Stdio::null(),
                _ => Stdio::piped(),
            });
        let mut child = self.command.spawn().map_err(|source| Error::Spawn {
            name: self.name.clone(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        let mut readers = JoinSet::new();
        if let Some(stderr) = child.stderr.take() {
            readers.spawn(logs::read(
                stderr,
                self.name.clone(),
                pid,
                self.logs.clone(),
                None,
            ));
        }
        let mut ready = None;
        if let (Some(within), Some(stdout)) = (wait, child.stdout.take()) {
            let (tx, rx) = oneshot::channel();
            readers.spawn(logs::read(
                stdout,
                self.name.clone(),
                pid,
                self.logs.clone(),
                Some(tx),
            ));
            match tokio::time::timeout(within, rx).await {
                Ok(Ok(line)) => ready = Some(line),
                Ok(Err(_)) => {
                    // Its stdout closed without a ready line: it is exiting.
                    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .map_or_else(|| "still running, stdout closed".to_owned(), describe);
                    // Its last lines (the reason) are forwarded before we return.
                    drain(&mut readers).await;
                    return Err(Error::ExitedBeforeReady {
                        name: self.name.clone(),
                        status,
                    });
                }
                Err(_) => {
                    return Err(Error::NotReady {
                        name: self.name.clone(),
                        within,
                    });
                }
            }
        }
        Ok(Process::new(child, pid, self.name.clone(), ready, readers))
    }

    /// Runs the process to its exit with stdout and stderr captured; kills it and fails
    /// if it has not exited within `within`.
    pub async fn output(&mut self, within: Duration) -> Result<Output, Error> {
        match tokio::time::timeout(within, self.command.output()).await {
            Ok(output) => output.map_err(|source| Error::Spawn {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(Error::DidNotExit {
                name: self.name.clone(),
                within,
            }),
        }
    }
}

/// Waits a little for the log readers to reach the end of their pipes.
pub(crate) async fn drain(readers: &mut JoinSet<()>) {
    let all = async { while readers.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(Duration::from_secs(5), all).await;
}

/// An exit status as a person reads it: `exit code 1`, `signal 9`.
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}
