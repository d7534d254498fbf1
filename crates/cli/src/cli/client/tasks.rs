//! `mcp-tasks tasks get|wait|cancel|answer ID` and `mcp-tasks tasks resume`.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use mcp_tasks_client::{is_terminal, status_of};
use serde_json::{Map, Value, json};

use super::follow::{self, Interrupts, is_unknown_task};
use super::output::{EXIT_CODES, Exit, outln, print_json};
use super::prompt::PromptError;
use super::{Server, Session};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum TasksCommand {
    /// Print a task's current state (its result once it is finished).
    #[command(after_help = EXIT_CODES)]
    Get(TaskArgs),
    /// Follow a task to its end with a live status line, asking for any input it needs.
    #[command(after_help = EXIT_CODES)]
    Wait(TaskArgs),
    /// Cancel a task and wait until it has stopped.
    #[command(after_help = EXIT_CODES)]
    Cancel(TaskArgs),
    /// Answer a task's outstanding input requests, in the terminal or with --response.
    #[command(after_help = EXIT_CODES)]
    Answer(AnswerArgs),
    /// Follow every unfinished task this client started (the state file), one after the
    /// other, asking for any input they need. Exits with the first non-zero code.
    #[command(after_help = EXIT_CODES)]
    Resume(ResumeArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct TaskArgs {
    #[command(flatten)]
    server: Server,
    /// The task's id.
    id: String,
    /// Print JSON (the task as `tasks/get` shows it).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct AnswerArgs {
    #[command(flatten)]
    server: Server,
    /// The task's id.
    id: String,
    /// An answer, `KEY=JSON` (e.g. `approve_outline='{"action":"accept","content":{"approved":true}}'`);
    /// repeatable. Without any, each outstanding request is asked in the terminal.
    #[arg(long = "response", value_name = "KEY=JSON")]
    responses: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ResumeArgs {
    #[command(flatten)]
    server: Server,
    /// Print JSON (one entry per task followed).
    #[arg(long)]
    json: bool,
}

impl TasksCommand {
    pub(super) fn json(&self) -> bool {
        match self {
            Self::Get(a) | Self::Wait(a) | Self::Cancel(a) => a.json,
            Self::Answer(a) => a.json,
            Self::Resume(a) => a.json,
        }
    }
}

pub(super) async fn run(command: TasksCommand) -> anyhow::Result<Exit> {
    match command {
        TasksCommand::Get(a) => get(a).await,
        TasksCommand::Wait(a) => wait(a).await,
        TasksCommand::Cancel(a) => cancel(a).await,
        TasksCommand::Answer(a) => answer(a).await,
        TasksCommand::Resume(a) => resume(a).await,
    }
}

async fn get(args: TaskArgs) -> anyhow::Result<Exit> {
    let session = Session::open(&args.server, args.json)?;
    let task = session.read(&args.id).await?;
    if session.json {
        print_json(&task);
    } else {
        describe(&task);
    }
    Ok(Exit::of_task(&task, false))
}

async fn wait(args: TaskArgs) -> anyhow::Result<Exit> {
    let session = Session::open(&args.server, args.json)?;
    let mut interrupts = Interrupts::install()?;
    let followed = session.follow(&args.id, &mut interrupts, true).await?;
    session.print_task(&followed.task);
    Ok(followed.exit)
}

async fn cancel(args: TaskArgs) -> anyhow::Result<Exit> {
    let session = Session::open(&args.server, args.json)?;
    let mut interrupts = Interrupts::install()?;
    if let Err(e) = session.client.cancel_task(&args.id).await {
        if is_unknown_task(&e) {
            session.forget(&args.id);
        }
        return Err(e).with_context(|| format!("cancelling task {}", args.id));
    }
    // A running task stops when its worker hears of it; one that had already finished
    // stays as it was, and its code says so.
    let followed = session.follow(&args.id, &mut interrupts, false).await?;
    session.print_task(&followed.task);
    // Cancelled is what was asked for, so it is success here (as for `kubectl delete` or
    // `gh run cancel`); 4 is for the commands that wanted the task to finish.
    Ok(match followed.exit {
        Exit::Cancelled => Exit::Completed,
        exit => exit,
    })
}

async fn answer(args: AnswerArgs) -> anyhow::Result<Exit> {
    let session = Session::open(&args.server, args.json)?;
    let (responses, declined) = if args.responses.is_empty() {
        let task = session.read(&args.id).await?;
        if status_of(&task) != "input_required" {
            bail!(
                "task {} is {}: it is not waiting for input",
                args.id,
                status_of(&task)
            );
        }
        let requests = task
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        match follow::ask(requests).await {
            Ok(answers) => (answers.responses, answers.declined),
            Err(PromptError::Interrupted) => {
                eprintln!("Nothing was answered.");
                return Ok(Exit::Unfinished);
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        parse_responses(&args.responses)?
    };
    let keys: Vec<String> = responses.keys().cloned().collect();
    session
        .client
        .update_task(&args.id, Value::Object(responses))
        .await
        .with_context(|| format!("answering task {}", args.id))?;
    if session.json {
        print_json(&json!({ "taskId": args.id, "answered": keys }));
    } else {
        eprintln!("Answered {} of task {}.", keys.join(", "), args.id);
    }
    Ok(if declined {
        Exit::Declined
    } else {
        Exit::Completed
    })
}

async fn resume(args: ResumeArgs) -> anyhow::Result<Exit> {
    let session = Session::open(&args.server, args.json)?;
    let mut interrupts = Interrupts::install()?;
    let state = session.state()?;
    let entries = state.tasks(&session.url)?;
    let elsewhere = state.all()?.len().saturating_sub(entries.len());
    if !session.json {
        if entries.is_empty() {
            eprintln!("No unfinished tasks of {} to resume.", session.url);
        }
        if elsewhere > 0 {
            eprintln!(
                "{elsewhere} unfinished task(s) of other servers left alone (resume them with their MCP_TASKS_URL)."
            );
        }
    }
    let mut first = Exit::Completed;
    let mut report = Vec::new();
    for entry in entries {
        if !session.json {
            eprintln!("Resuming task {} ({}).", entry.task_id, entry.tool);
        }
        let (exit, task, detached) =
            match session.follow(&entry.task_id, &mut interrupts, true).await {
                Ok(followed) => {
                    if !session.json {
                        followed_outcome(&followed.task);
                    }
                    (followed.exit, followed.task, followed.detached)
                }
                Err(e) => {
                    if !session.json {
                        eprintln!("mcp-tasks: task {}: {e:#}", entry.task_id);
                    }
                    (Exit::Error, json!({ "error": format!("{e:#}") }), false)
                }
            };
        report.push(json!({
            "taskId": entry.task_id,
            "tool": entry.tool,
            "exitCode": exit as u8,
            "task": task,
        }));
        if first == Exit::Completed {
            first = exit;
        }
        // Detached: the user wants the terminal back, not the next task.
        if detached {
            break;
        }
    }
    if session.json {
        print_json(&json!({ "tasks": report }));
    }
    Ok(first)
}

fn followed_outcome(task: &Value) {
    if is_terminal(task) {
        super::output::print_outcome(task);
    }
}

impl Session {
    /// `tasks/get`, forgetting a task the server does not know and one that is terminal.
    async fn read(&self, task_id: &str) -> anyhow::Result<Value> {
        match self.client.get_task(task_id).await {
            Ok(task) => {
                if is_terminal(&task) {
                    self.forget(task_id);
                }
                Ok(task)
            }
            Err(e) => {
                if is_unknown_task(&e) {
                    self.forget(task_id);
                }
                Err(e).with_context(|| format!("reading task {task_id}"))
            }
        }
    }
}

/// A task's state for a person: status and message, then its input requests or outcome.
fn describe(task: &Value) {
    let id = task.get("taskId").and_then(Value::as_str).unwrap_or("?");
    match status_of(task) {
        "working" | "input_required" => {
            let message = task
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            outln!("Task {id} is {}{message}", status_of(task));
            for (key, request) in task
                .get("inputRequests")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let message = request
                    .pointer("/params/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                outln!("  needs {key}: {message}");
            }
        }
        _ => super::output::print_outcome(task),
    }
}

fn parse_responses(responses: &[String]) -> anyhow::Result<(Map<String, Value>, bool)> {
    let mut map = Map::new();
    let mut declined = false;
    for response in responses {
        let Some((key, value)) = response.split_once('=') else {
            bail!("--response {response:?}: expected KEY=JSON");
        };
        let value: Value = serde_json::from_str(value)
            .with_context(|| format!("--response {key}: the value is not JSON"))?;
        let Some(action) = value.get("action").and_then(Value::as_str) else {
            bail!("--response {key}: expected an object with an action (accept, decline, cancel)");
        };
        declined |= action != "accept";
        map.insert(key.to_owned(), value);
    }
    Ok((map, declined))
}
