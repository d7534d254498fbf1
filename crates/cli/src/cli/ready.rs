//! `--ready-line`: one JSON object on a line of stdout once a process is up, for whatever
//! started it (the harnesses, a supervisor) to read instead of log text:
//! `{"listen":"127.0.0.1:8080","metrics":null,"ready":"replica","url":"http://127.0.0.1:8080/mcp"}`
//! (`serve`, and `dev` with `"ready":"dev"`: once both listeners are bound);
//! `{"ready":"worker","worker_id":"…","metrics":"127.0.0.1:9090"}` (`worker`: once its
//! tools are loaded and its metrics listener, if any, is bound). Nothing else is printed on
//! stdout, so the first line is the one.

use std::io::Write;

use clap::Args;
use serde_json::Value;

#[derive(Debug, Args)]
pub(super) struct ReadyLine {
    /// Print one JSON line on stdout once ready, for a program that starts this one:
    /// what is ready (`ready`) and where it listens (`listen`, `url`, `metrics`; a
    /// worker: `worker_id`, `metrics`).
    #[arg(long = "ready-line", env = "MCP_TASKS_READY_LINE")]
    enabled: bool,
    /// What the line says is ready (`replica`, `dev`, `worker`), set by the subcommand.
    #[arg(skip = "replica")]
    pub(super) role: &'static str,
}

impl ReadyLine {
    /// Prints the line (when asked for) with `role` and the `fields` of this process.
    pub(super) fn announce(&self, fields: Value) {
        if !self.enabled {
            return;
        }
        let mut line = serde_json::json!({ "ready": self.role });
        if let (Some(line), Value::Object(fields)) = (line.as_object_mut(), fields) {
            line.extend(fields);
        }
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            // Whoever asked for it is gone; the process serves all the same.
            tracing::warn!("cannot print the ready line: {e}");
        }
    }
}
