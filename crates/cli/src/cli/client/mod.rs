//! The command-line client: `tools`, `call` and `tasks …`, for any 2026-07-28 server with
//! the Tasks extension. The protocol is `mcp-tasks-client`'s; this module is the terminal
//! side: arguments, the status line, prompts, the state file, output and exit codes.

mod follow;
mod output;
mod prompt;
mod state;
mod tasks;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use mcp_tasks_client::{CallRound, Client};
use mcp_tasks_wire::secret::Secret;
use serde_json::{Map, Value};

use self::follow::Interrupts;
use self::output::{EXIT_CODES, Exit, outln, print_json};
use self::prompt::PromptError;
use self::state::{Entry, State};
pub(super) use self::tasks::TasksCommand;
use super::args::Endpoint;

#[derive(Debug, Subcommand)]
pub(super) enum ClientCommand {
    /// List the server's tools and their input schemas.
    #[command(after_help = EXIT_CODES)]
    Tools(ToolsCommand),
    /// Call a tool: follow its task with a live status line, ask in the terminal for the
    /// input it needs, print its result.
    #[command(after_help = EXIT_CODES)]
    Call(CallCommand),
    /// Read, follow, answer and cancel tasks; resume the unfinished ones this client started.
    #[command(subcommand, after_help = EXIT_CODES)]
    Tasks(TasksCommand),
}

/// The server and the local state every client command uses.
#[derive(Debug, Args)]
pub(super) struct Server {
    #[command(flatten)]
    endpoint: Endpoint,
    /// Bearer token sent with every request.
    #[arg(long, env = "MCP_TASKS_TOKEN", hide_env_values = true)]
    token: Option<Secret>,
    /// File of the unfinished tasks this client started, for `tasks resume`
    /// [default: $XDG_STATE_HOME/mcp-tasks/tasks.json, else ~/.local/state/mcp-tasks/tasks.json].
    #[arg(long, env = "MCP_TASKS_STATE_FILE")]
    state_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct ToolsCommand {
    #[command(flatten)]
    server: Server,
    /// Print JSON (the tools as the server lists them).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct CallCommand {
    #[command(flatten)]
    server: Server,
    /// The tool to call.
    tool: String,
    /// An argument, `key=value`; the value is taken as text for string properties and as
    /// JSON otherwise (`--arg seconds=3 --arg label=x`). Repeatable; wins over `--json`.
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    args: Vec<String>,
    /// Print JSON instead of text; with a value, that JSON object is the arguments
    /// (`--json '{"size":"large"}'`).
    #[arg(long, value_name = "ARGS", num_args = 0..=1, default_missing_value = "")]
    json: Option<String>,
    /// Print the task id as soon as the task exists and exit; follow it later with
    /// `tasks wait` or `tasks resume`.
    #[arg(long)]
    no_wait: bool,
}

/// One client command's connection, state file and output mode.
pub(super) struct Session {
    client: Client,
    url: String,
    state: Option<State>,
    json: bool,
}

impl Session {
    fn open(server: &Server, json: bool) -> anyhow::Result<Self> {
        let mut client = Client::with_tasks(&server.endpoint.url);
        if let Some(token) = &server.token {
            client = client.bearer(token.expose());
        }
        Ok(Self {
            client,
            url: server.endpoint.url.clone(),
            state: server
                .state_file
                .clone()
                .or_else(State::default_path)
                .map(State::new),
            json,
        })
    }

    /// The state file; without one (no HOME either) only starting and resuming tasks fail.
    fn state(&self) -> anyhow::Result<&State> {
        self.state.as_ref().context(
            "no place for the state file: set MCP_TASKS_STATE_FILE (or HOME or XDG_STATE_HOME)",
        )
    }

    /// Records a task this client started, so that `tasks resume` finds it.
    fn remember(&self, tool: &str, created: &Value) {
        let entry = Entry {
            url: self.url.clone(),
            task_id: created
                .get("taskId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            tool: tool.to_owned(),
            created_at: created
                .get("createdAt")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        if let Err(e) = self.state().and_then(|s| s.add(entry)) {
            eprintln!("mcp-tasks: the task will not be resumable: {e:#}");
        }
    }

    /// Prints a task's outcome (the snapshot as JSON, or for a person).
    fn print_task(&self, task: &Value) {
        if self.json {
            print_json(task);
        } else {
            output::print_outcome(task);
        }
    }
}

/// A client command's exit code other than 0, carried out of [`run`] as its error (the
/// command has already said what happened).
#[derive(Debug, thiserror::Error)]
#[error("exit code {0}")]
pub(super) struct Exited(u8);

impl Exited {
    pub(super) fn code(&self) -> ExitCode {
        ExitCode::from(self.0)
    }
}

pub(super) async fn run(command: ClientCommand) -> anyhow::Result<()> {
    match run_command(command).await {
        Exit::Completed => Ok(()),
        exit => Err(Exited(exit as u8).into()),
    }
}

async fn run_command(command: ClientCommand) -> Exit {
    let json = match &command {
        ClientCommand::Tools(c) => c.json,
        ClientCommand::Call(c) => c.json.is_some(),
        ClientCommand::Tasks(c) => c.json(),
    };
    let result = match command {
        ClientCommand::Tools(c) => tools(c).await,
        ClientCommand::Call(c) => call(c).await,
        ClientCommand::Tasks(c) => tasks::run(c).await,
    };
    match result {
        Ok(exit) => exit,
        Err(e) => output::error(json, &e),
    }
}

async fn tools(command: ToolsCommand) -> anyhow::Result<Exit> {
    let session = Session::open(&command.server, command.json)?;
    let tools = session.client.list_tools().await?;
    if session.json {
        print_json(&serde_json::json!({ "tools": tools }));
        return Ok(Exit::Completed);
    }
    for tool in &tools {
        let text = |k: &str| tool.get(k).and_then(Value::as_str).unwrap_or_default();
        let title = match text("title") {
            "" => String::new(),
            t => format!(" ({t})"),
        };
        outln!("{}{title}", text("name"));
        if !text("description").is_empty() {
            outln!("  {}", text("description"));
        }
        let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
        let schema = serde_json::to_string_pretty(&schema)?;
        outln!("  input schema:");
        for line in schema.lines() {
            outln!("    {line}");
        }
    }
    Ok(Exit::Completed)
}

async fn call(command: CallCommand) -> anyhow::Result<Exit> {
    let session = Session::open(&command.server, command.json.is_some())?;
    let mut interrupts = Interrupts::install()?;
    let tools = session.client.list_tools().await?;
    let Some(tool) = tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(command.tool.as_str()))
    else {
        bail!(
            "the server has no tool named {:?} (`mcp-tasks tools` lists them)",
            command.tool
        );
    };
    let arguments = arguments(tool, command.json.as_deref(), &command.args)?;
    let mut declined = false;
    let mut retry = None;
    loop {
        let round = session
            .client
            .call_tool_round(&command.tool, arguments.clone(), retry.take())
            .await?;
        match round {
            CallRound::Complete(result) => {
                if session.json {
                    print_json(&result);
                } else {
                    output::print_result(&result);
                }
                return Ok(Exit::of_task(&result, declined));
            }
            CallRound::InputRequired(needed) => {
                match follow::ask(needed.input_requests.clone()).await {
                    Ok(answers) => {
                        declined |= answers.declined;
                        retry = Some(needed.retry_params(answers.responses));
                    }
                    Err(PromptError::Interrupted) => {
                        eprintln!("Stopped before the server created a task.");
                        return Ok(Exit::Cancelled);
                    }
                    Err(e) => return Err(e).context("the tool needs input before it starts"),
                }
            }
            CallRound::Task(created) => {
                let task_id = created
                    .get("taskId")
                    .and_then(Value::as_str)
                    .context("the server created a task without a taskId")?
                    .to_owned();
                session.remember(&command.tool, &created);
                if command.no_wait {
                    if session.json {
                        print_json(&created);
                    } else {
                        outln!("{task_id}");
                    }
                    return Ok(Exit::Completed);
                }
                if !session.json {
                    eprintln!("Task {task_id} started.");
                }
                let followed = session.follow(&task_id, &mut interrupts, true).await?;
                session.print_task(&followed.task);
                let exit = followed.exit;
                return Ok(if declined && exit == Exit::Completed {
                    Exit::Declined
                } else {
                    exit
                });
            }
        }
    }
}

/// The call's arguments: the `--json` object, then each `--arg` over it.
fn arguments(tool: &Value, json: Option<&str>, args: &[String]) -> anyhow::Result<Value> {
    let mut arguments = match json.filter(|j| !j.is_empty()) {
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            _ => {
                bail!("--json takes the arguments as a JSON object, e.g. '{{\"size\":\"large\"}}'")
            }
        },
        None => Map::new(),
    };
    let properties = tool.pointer("/inputSchema/properties");
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            bail!("--arg {arg:?}: expected KEY=VALUE");
        };
        let kind = properties
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str);
        let value = match kind {
            Some("string") => Value::String(value.to_owned()),
            _ => serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned())),
        };
        arguments.insert(key.to_owned(), value);
    }
    Ok(Value::Object(arguments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_follow_the_input_schema() {
        let tool = json!({ "inputSchema": { "properties": {
            "label": { "type": "string" }, "seconds": { "type": "integer" }
        } } });
        let args = |json: Option<&str>, a: &[&str]| {
            let a: Vec<String> = a.iter().map(|s| (*s).to_owned()).collect();
            arguments(&tool, json, &a)
        };
        assert_eq!(
            args(None, &["seconds=3", "label=42", "extra=true"]).expect("args"),
            json!({ "seconds": 3, "label": "42", "extra": true })
        );
        assert_eq!(
            args(Some(r#"{"seconds":1,"label":"a"}"#), &["seconds=2"]).expect("args"),
            json!({ "seconds": 2, "label": "a" })
        );
        assert_eq!(args(Some(""), &[]).expect("args"), json!({}));
        assert!(args(Some("[1]"), &[]).is_err());
        assert!(args(None, &["novalue"]).is_err());
    }
}
