//! What the client commands print, and the exit codes they end with.

use mcp_tasks_client::ClientError;
use serde_json::{Value, json};

/// The exit codes of the client commands (README and `--help` list the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    /// The task (or a sync tool) completed.
    Completed = 0,
    /// Anything that is not a task outcome: the server unreachable or refusing the
    /// request, an unknown task, a state file that cannot be read.
    Error = 1,
    /// The task ended `failed` (a JSON-RPC error while it ran).
    Failed = 3,
    /// The task ended `cancelled` (not for `tasks cancel`, which asked for that).
    Cancelled = 4,
    /// The task completed, but only after the user declined or dismissed an input request.
    Declined = 5,
    /// The task is not finished: detached, `tasks get` of a live task, or input needed
    /// with no terminal to ask on.
    Unfinished = 6,
    /// The task completed with a tool error (`isError: true`).
    ToolError = 7,
}

impl Exit {
    /// What a snapshot of a task (or a sync `CallToolResult`, `status` absent) says.
    pub(super) fn of_task(task: &Value, declined: bool) -> Self {
        match mcp_tasks_client::status_of(task) {
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            "completed" | "" if declined => Self::Declined,
            "completed" => Self::of_result(task.get("result").unwrap_or(&Value::Null)),
            "" => Self::of_result(task),
            _ => Self::Unfinished,
        }
    }

    fn of_result(result: &Value) -> Self {
        if result.get("isError") == Some(&Value::Bool(true)) {
            Self::ToolError
        } else {
            Self::Completed
        }
    }
}

/// The `--help` text on exit codes.
pub(super) const EXIT_CODES: &str = "Exit codes: 0 completed; 1 error (server unreachable or refusing, unknown task, bad state file); 2 usage; 3 task failed; 4 task cancelled (`tasks cancel` exits 0 once the task is cancelled); 5 completed after input was declined or dismissed; 6 not finished (detached, still running, or input needed without a terminal); 7 completed with a tool error (isError).";

/// `println!` that gives up quietly when stdout is gone (`| head`), instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(super) use outln;

/// Prints JSON output on stdout, one document per command.
pub(super) fn print_json(value: &Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => outln!("{text}"),
        Err(e) => eprintln!("mcp-tasks: cannot encode the output: {e}"),
    }
}

/// Reports an error (on stdout as JSON in `--json` mode, else on stderr).
pub(super) fn error(json_mode: bool, e: &anyhow::Error) -> Exit {
    if json_mode {
        let mut error = json!({ "message": format!("{e:#}") });
        if let Some(ClientError::Rpc { code, data, .. }) = e.downcast_ref::<ClientError>() {
            error["code"] = json!(code);
            if let Some(data) = data {
                error["data"] = data.clone();
            }
        }
        print_json(&json!({ "error": error }));
    } else {
        eprintln!("mcp-tasks: {e:#}");
    }
    Exit::Error
}

/// A `CallToolResult` for a person: the text of each content block, other blocks
/// described, then `structuredContent` as JSON.
pub(super) fn print_result(result: &Value) {
    let is_error = result.get("isError") == Some(&Value::Bool(true));
    if is_error {
        eprintln!("The tool reported an error:");
    }
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("?");
        let text = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
        match kind {
            "text" => outln!("{}", text("text")),
            "resource_link" => outln!("[resource] {} {}", text("uri"), text("name")),
            "resource" => {
                let resource = block.get("resource").cloned().unwrap_or(Value::Null);
                match resource.get("text").and_then(Value::as_str) {
                    Some(t) => outln!("{t}"),
                    None => outln!(
                        "[resource] {}",
                        resource.get("uri").and_then(Value::as_str).unwrap_or("?")
                    ),
                }
            }
            other => outln!(
                "[{other}: {}, {} bytes of base64]",
                text("mimeType"),
                text("data").len()
            ),
        }
    }
    if let Some(structured) = result.get("structuredContent") {
        match serde_json::to_string_pretty(structured) {
            Ok(text) => outln!("{text}"),
            Err(e) => eprintln!("mcp-tasks: cannot encode structuredContent: {e}"),
        }
    }
}

/// A terminal task's outcome for a person (the result on stdout, the rest on stderr).
pub(super) fn print_outcome(task: &Value) {
    let id = task.get("taskId").and_then(Value::as_str).unwrap_or("?");
    let message = task
        .get("statusMessage")
        .and_then(Value::as_str)
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    match mcp_tasks_client::status_of(task) {
        "completed" => print_result(task.get("result").unwrap_or(&Value::Null)),
        "failed" => {
            let error = task.get("error").cloned().unwrap_or(Value::Null);
            eprintln!(
                "Task {id} failed: {} (code {}){message}",
                error.get("message").and_then(Value::as_str).unwrap_or("?"),
                error.get("code").and_then(Value::as_i64).unwrap_or(0)
            );
        }
        "cancelled" => eprintln!("Task {id} was cancelled{message}"),
        status => eprintln!("Task {id} is {status}{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_its_own_code() {
        let done = json!({ "status": "completed", "result": { "content": [] } });
        let tool_error = json!({ "status": "completed", "result": { "isError": true } });
        assert_eq!(Exit::of_task(&done, false), Exit::Completed);
        assert_eq!(Exit::of_task(&done, true), Exit::Declined);
        assert_eq!(Exit::of_task(&tool_error, false), Exit::ToolError);
        assert_eq!(
            Exit::of_task(&json!({ "status": "failed" }), true),
            Exit::Failed
        );
        assert_eq!(
            Exit::of_task(&json!({ "status": "cancelled" }), true),
            Exit::Cancelled
        );
        assert_eq!(
            Exit::of_task(&json!({ "status": "working" }), false),
            Exit::Unfinished
        );
        assert_eq!(
            Exit::of_task(&json!({ "isError": true, "content": [] }), false),
            Exit::ToolError
        );
        for (code, exit) in [
            ("0 completed", Exit::Completed),
            ("1 error", Exit::Error),
            ("3 task failed", Exit::Failed),
            ("4 task cancelled", Exit::Cancelled),
            ("5 completed after input was declined", Exit::Declined),
            ("6 not finished", Exit::Unfinished),
            ("7 completed with a tool error", Exit::ToolError),
        ] {
            assert!(EXIT_CODES.contains(code), "{code}");
            assert!(code.starts_with(&(exit as u8).to_string()), "{code}");
        }
    }
}
