//! The command-line client (`mcp-tasks tools`, `call`, `tasks …`) as a person runs it: the
//! built binary in a pseudo-terminal (rexpect) against a real replica and worker with the
//! `demo` and `conformance` packs, answering its prompts with keystrokes, pressing Ctrl-C,
//! killing it mid-task; and without a terminal, for exit codes and `--json`.

mod form;
mod plain;
mod pty;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use rexpect::session::{Options, PtySession, spawn_with_options};
use serde_json::Value;

use crate::harness::TestApp;
use crate::harness::procs::{self, BIN};

const PACKS: &str = "demo,conformance";
/// Longest wait for one expected piece of terminal output.
const EXPECT_MS: u64 = 30_000;

/// One replica, one worker and a state file of its own.
struct Fixture {
    app: TestApp,
    dir: PathBuf,
    extra_env: Vec<(String, String)>,
}

impl Fixture {
    async fn start() -> Self {
        let app = TestApp::builder().packs(PACKS).workers(1).start().await;
        Self::with_app(app)
    }

    fn with_app(app: TestApp) -> Self {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-cli-{}", uuid::Uuid::new_v4()));
        Self {
            app,
            dir,
            extra_env: Vec::new(),
        }
    }

    fn url(&self) -> String {
        self.app.url().to_owned()
    }

    fn state_file(&self) -> PathBuf {
        self.dir.join("state").join("tasks.json")
    }

    /// The client's environment: the server, the state file, a terminal type.
    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("MCP_TASKS_URL".to_owned(), self.url()),
            (
                "MCP_TASKS_STATE_FILE".to_owned(),
                self.state_file().display().to_string(),
            ),
            ("TERM".to_owned(), "xterm".to_owned()),
            ("MCP_TASKS_LOG".to_owned(), "warn".to_owned()),
        ];
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// `mcp-tasks args…` without a terminal (stdin from /dev/null, output captured).
    async fn run(&self, args: &[&str]) -> Output {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        procs::output(procs::mcp_tasks(args, &env), Duration::from_secs(60)).await
    }

    /// `mcp-tasks args…` in a pseudo-terminal, driven by `drive` on a blocking thread
    /// (rexpect reads synchronously; the replica and worker run on the test's runtime).
    async fn pty<R: Send + 'static>(
        &self,
        args: &[&str],
        drive: impl FnOnce(&mut PtySession) -> R + Send + 'static,
    ) -> R {
        // Its stdin must be the terminal, not the scrubbed command's /dev/null.
        let mut cmd = procs::command(BIN);
        cmd.stdin(std::process::Stdio::inherit()).args(args);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        tokio::task::spawn_blocking(move || {
            let mut session = spawn_with_options(
                cmd,
                Options {
                    timeout_ms: Some(EXPECT_MS),
                    strip_ansi_escape_codes: true,
                },
            )
            .expect("spawning mcp-tasks in a pseudo-terminal");
            drive(&mut session)
        })
        .await
        .expect("the terminal session panicked")
    }

    /// The task ids in the state file.
    fn state_ids(&self) -> Vec<String> {
        let Ok(text) = std::fs::read_to_string(self.state_file()) else {
            return Vec::new();
        };
        let file: Value = serde_json::from_str(&text).expect("the state file is JSON");
        file["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["taskId"].as_str().expect("taskId").to_owned())
            .collect()
    }

    /// The task as its owner (the client sends no principal: `anonymous`) reads it.
    async fn task(&self, id: &str) -> Value {
        self.app
            .client("anonymous")
            .get_task(id)
            .await
            .expect("tasks/get")
    }

    async fn stop(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        self.app.stop().await;
    }
}

/// Waits for the end of the output and the exit code (a signal counts as -1).
fn exit_code(session: &mut PtySession) -> (String, i32) {
    let rest = session.exp_eof().expect("the client did not exit");
    let status = session.process().wait().expect("wait");
    let code = match status {
        rexpect::process::wait::WaitStatus::Exited(_, code) => code,
        _ => -1,
    };
    (rest, code)
}

/// The screen up to the exit, after what `screen` already holds, and the exit code.
fn to_exit(session: &mut PtySession, screen: String) -> (String, i32) {
    let (rest, code) = exit_code(session);
    (screen + &rest, code)
}

/// Waits for the client's "How do you respond?" choice and takes its first option: answer
/// the request.
fn respond(session: &mut PtySession) -> String {
    let screen = expect(session, "How do you respond?");
    send(session, ENTER);
    screen
}

fn expect(session: &mut PtySession, text: &str) -> String {
    session
        .exp_string(text)
        .unwrap_or_else(|e| panic!("waiting for {text:?} on the terminal: {e}"))
}

fn expect_regex(session: &mut PtySession, regex: &str) -> String {
    session
        .exp_regex(regex)
        .map(|(before, matched)| before + &matched)
        .unwrap_or_else(|e| panic!("waiting for /{regex}/ on the terminal: {e}"))
}

fn send(session: &mut PtySession, keys: &str) {
    session.send(keys).expect("typing");
    session.flush().expect("typing");
}

const ENTER: &str = "\r";
const DOWN: &str = "\x1b[B";

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_out(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}\nstderr: {}",
            stdout(out),
            stderr(out)
        )
    })
}

/// Asserts the exit code, showing the output when it differs.
fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}
