//! Following one task to its end: a live status line (spinner, status, `statusMessage`,
//! time since the task was created) fed by `subscriptions/listen` when the server offers
//! it and by polling at `pollIntervalMs` otherwise; the input it asks for, asked in the
//! terminal and sent with `tasks/update`; Ctrl-C, which offers to cancel the task or to
//! detach from it.

use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use mcp_tasks_client::{ClientError, is_terminal, status_of};
use serde_json::{Map, Value};
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::Session;
use super::output::Exit;
use super::prompt::{self, PromptError};

/// The longest gap between polls, whatever `pollIntervalMs` says: a person watches.
const MAX_POLL: Duration = Duration::from_secs(5);

/// SIGINT, caught for the whole command so that a Ctrl-C between two awaits is kept
/// until the follow loop looks.
pub(super) struct Interrupts(Signal);

impl Interrupts {
    pub(super) fn install() -> anyhow::Result<Self> {
        Ok(Self(
            signal(SignalKind::interrupt()).context("cannot catch Ctrl-C")?,
        ))
    }

    async fn next(&mut self) {
        self.0.recv().await;
    }

    /// Forgets the Ctrl-Cs already delivered (the one that opened a menu, say).
    async fn drain(&mut self) {
        while let Ok(Some(())) = tokio::time::timeout(Duration::ZERO, self.0.recv()).await {}
    }
}

/// How following a task ended.
pub(super) struct Followed {
    /// The last snapshot seen.
    pub(super) task: Value,
    pub(super) exit: Exit,
    /// The user chose to detach (Ctrl-C): they want the terminal back.
    pub(super) detached: bool,
}

/// What the user chose after Ctrl-C.
enum Choice {
    Cancel,
    Detach,
    Wait,
}

impl Session {
    /// Follows `task_id` until it is terminal; when it needs input, asks for it (if
    /// `answer` and there is a terminal) or stops there. Forgets the task in the state
    /// file once it is terminal or unknown to the server.
    pub(super) async fn follow(
        &self,
        task_id: &str,
        interrupts: &mut Interrupts,
        answer: bool,
    ) -> anyhow::Result<Followed> {
        let mut declined = false;
        let mut cancelling = false;
        let mut answered = std::collections::HashSet::new();
        loop {
            let line = StatusLine::new(self.json);
            let followed = tokio::select! {
                r = self.client.follow_task(task_id, MAX_POLL, |t| line.show(t)) => r,
                () = interrupts.next() => {
                    line.clear();
                    match self.interrupted(task_id, interrupts).await {
                        Choice::Wait => continue,
                        Choice::Detach => return self.detached(task_id).await,
                        Choice::Cancel => {
                            self.cancel(task_id, &mut cancelling).await?;
                            continue;
                        }
                    }
                }
            };
            line.clear();
            let task = match followed {
                Ok(task) => task,
                Err(e) => {
                    if is_unknown_task(&e) {
                        self.forget(task_id);
                    }
                    return Err(e.into());
                }
            };
            if is_terminal(&task) {
                self.forget(task_id);
                let exit = Exit::of_task(&task, declined);
                return Ok(Followed {
                    task,
                    exit,
                    detached: false,
                });
            }
            // `input_required`: follow_task returns only then or when terminal.
            if !answer || cancelling || !prompt::have_terminal() {
                if answer && !self.json {
                    eprintln!(
                        "Task {task_id} needs input; answer it in a terminal with `mcp-tasks tasks answer {task_id}`."
                    );
                }
                return Ok(Followed {
                    task,
                    exit: Exit::Unfinished,
                    detached: false,
                });
            }
            // Keys are unique over a task's lifetime, so one already answered is only a
            // snapshot older than the answer (the ack may come before `tasks/get` shows it).
            let requests: Map<String, Value> = task
                .get("inputRequests")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(key, _)| !answered.contains(*key))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if requests.is_empty() {
                let every = task
                    .get("pollIntervalMs")
                    .and_then(Value::as_u64)
                    .map_or(MAX_POLL, Duration::from_millis)
                    .min(MAX_POLL);
                tokio::time::sleep(every).await;
                continue;
            }
            let asked = ask(requests).await;
            // A Ctrl-C while the prompts were open reached them as a key (or was lost
            // between two of them); it must not open the menu later.
            interrupts.drain().await;
            match asked {
                Ok(answers) => {
                    declined |= answers.declined;
                    let keys: Vec<String> = answers.responses.keys().cloned().collect();
                    let responses = Value::Object(answers.responses);
                    match self.client.update_task(task_id, responses).await {
                        Ok(_) => answered.extend(keys),
                        Err(e) if e.code() != Some(-32602) => return Err(e.into()),
                        // Invalid params: an answer the server found invalid (say why;
                        // the next round asks again), or a task it no longer knows (the
                        // next read says so).
                        Err(e) => eprintln!("The server did not accept the answer: {e}"),
                    }
                }
                Err(PromptError::Interrupted) => {
                    match self.interrupted(task_id, interrupts).await {
                        Choice::Wait => {}
                        Choice::Detach => return self.detached(task_id).await,
                        Choice::Cancel => self.cancel(task_id, &mut cancelling).await?,
                    }
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("task {task_id} needs input"));
                }
            }
        }
    }

    async fn cancel(&self, task_id: &str, cancelling: &mut bool) -> anyhow::Result<()> {
        self.client
            .cancel_task(task_id)
            .await
            .with_context(|| format!("cancelling task {task_id}"))?;
        *cancelling = true;
        if !self.json {
            eprintln!("Cancellation of task {task_id} requested.");
        }
        Ok(())
    }

    async fn interrupted(&self, task_id: &str, interrupts: &mut Interrupts) -> Choice {
        let id = task_id.to_owned();
        let choice = tokio::task::spawn_blocking(move || interrupt_menu(&id))
            .await
            .unwrap_or(Choice::Detach);
        interrupts.drain().await;
        choice
    }

    async fn detached(&self, task_id: &str) -> anyhow::Result<Followed> {
        let task = self.client.get_task(task_id).await.unwrap_or(Value::Null);
        if !self.json {
            eprintln!(
                "Detached from task {task_id}; it goes on. Follow it again with `mcp-tasks tasks wait {task_id}` or `mcp-tasks tasks resume`."
            );
        }
        let exit = if is_terminal(&task) {
            self.forget(task_id);
            Exit::of_task(&task, false)
        } else {
            Exit::Unfinished
        };
        Ok(Followed {
            task,
            exit,
            detached: true,
        })
    }

    /// Drops the task from the state file; a failure there is reported, never fatal.
    pub(super) fn forget(&self, task_id: &str) {
        if let Err(e) = self.state().and_then(|s| s.remove(&self.url, task_id)) {
            eprintln!("mcp-tasks: {e:#}");
        }
    }
}

/// Asks on a blocking thread: the prompts read the terminal.
pub(super) async fn ask(requests: Map<String, Value>) -> Result<prompt::Answers, PromptError> {
    tokio::task::spawn_blocking(move || prompt::ask_all(&requests))
        .await
        .unwrap_or_else(|e| Err(PromptError::Terminal(e.to_string())))
}

/// A task the server does not know (any more): to `tasks/get` or `tasks/cancel`, whose
/// only parameter is the id, invalid params (-32602) means an unknown or expired task.
pub(super) fn is_unknown_task(e: &ClientError) -> bool {
    e.code() == Some(-32602)
}

fn interrupt_menu(task_id: &str) -> Choice {
    if !prompt::have_terminal() {
        return Choice::Detach;
    }
    let choice = dialoguer::Select::new()
        .with_prompt(format!("Ctrl-C: what about task {task_id}?"))
        .items([
            "Cancel the task",
            "Detach (the task goes on; `mcp-tasks tasks resume` follows it again)",
            "Keep waiting",
        ])
        .default(0)
        .interact_on_opt(&dialoguer::console::Term::stderr());
    match choice {
        Ok(Some(0)) => Choice::Cancel,
        Ok(Some(2)) => Choice::Wait,
        // A second Ctrl-C, Esc, or a terminal gone: leave the task running.
        _ => Choice::Detach,
    }
}

/// The spinner line on a terminal; one line per change otherwise; nothing with `--json`.
struct StatusLine {
    bar: ProgressBar,
    plain: bool,
    last: std::sync::Mutex<String>,
}

impl StatusLine {
    fn new(json: bool) -> Self {
        let bar = if json {
            ProgressBar::hidden()
        } else {
            ProgressBar::new_spinner()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        Self {
            plain: !json && !dialoguer::console::Term::stderr().is_term(),
            bar,
            last: std::sync::Mutex::new(String::new()),
        }
    }

    fn show(&self, task: &Value) {
        let status = status_of(task);
        let text = match task.get("statusMessage").and_then(Value::as_str) {
            Some(m) => format!("{status}: {m}"),
            None => status.to_owned(),
        };
        if let Some(elapsed) = since_created(task) {
            self.bar.set_elapsed(elapsed);
        }
        self.bar.set_message(text.clone());
        if let Ok(mut last) = self.last.lock()
            && *last != text
        {
            if last.is_empty() {
                // From the first snapshot on, the spinner and the clock move between
                // updates too.
                self.bar.enable_steady_tick(Duration::from_millis(100));
            }
            if self.plain {
                eprintln!("{text}");
            }
            *last = text;
        }
    }

    fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// How long ago the task was created (its `createdAt`), so a resumed task's clock runs
/// from its start rather than from the resume.
fn since_created(task: &Value) -> Option<Duration> {
    let created = task.get("createdAt").and_then(Value::as_str)?;
    let at = time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339)
        .ok()?;
    Duration::try_from(time::OffsetDateTime::now_utc() - at).ok()
}
