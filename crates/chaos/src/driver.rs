//! The client side: task scripts, each driven through randomly chosen replicas, every
//! call retried on another replica while replicas and the database are being killed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_tasks_client::{Client, ClientError, is_terminal, status_of};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The longest one request may take before it counts as lost and is sent elsewhere.
const PER_REQUEST: Duration = Duration::from_secs(10);
/// How often a script polls `tasks/get`.
const POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `slow_compute` for 0 or 1 s: completed.
    Quick,
    /// `slow_compute` for 2 to 5 s: completed.
    Slow,
    /// `confirm_delete`, answered with `confirm: true`: completed, "Deleted …".
    Input,
    /// `slow_compute` for 30 s, cancelled after 0.2 to 2 s: cancelled.
    Cancel,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [Kind::Quick, Kind::Slow, Kind::Input, Kind::Cancel];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Quick => "quick",
            Kind::Slow => "slow",
            Kind::Input => "input",
            Kind::Cancel => "cancel",
        }
    }
}

/// One task's script, fixed up front from the seed.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub(crate) index: usize,
    pub(crate) kind: Kind,
    /// `slow_compute`'s `seconds`.
    seconds: u64,
    cancel_after: Duration,
    /// One Idempotency-Key per script: a retried `tools/call` finds the same task.
    key: String,
    /// Seeds this script's own choices (replicas, backoff jitter).
    seed: u64,
}

impl Script {
    /// The scripts of a run: a mix of kinds, all drawn from `rng`.
    pub(crate) fn plan(rng: &mut StdRng, count: usize, run_seed: u64) -> Vec<Self> {
        (0..count)
            .map(|index| {
                let kind = match rng.random_range(0..100) {
                    0..30 => Kind::Quick,
                    30..55 => Kind::Slow,
                    55..80 => Kind::Input,
                    _ => Kind::Cancel,
                };
                let seconds = match kind {
                    Kind::Quick => rng.random_range(0..=1),
                    Kind::Slow => rng.random_range(2..=5),
                    Kind::Input => 0,
                    Kind::Cancel => 30,
                };
                Script {
                    index,
                    kind,
                    seconds,
                    cancel_after: Duration::from_millis(rng.random_range(200..=2000)),
                    key: format!("chaos-{run_seed:016x}-{index}"),
                    seed: rng.random(),
                }
            })
            .collect()
    }

    fn label(&self) -> String {
        format!("script-{}", self.index)
    }

    fn filename(&self) -> String {
        format!("file-{}.txt", self.index)
    }

    fn tool(&self) -> &'static str {
        match self.kind {
            Kind::Input => "confirm_delete",
            _ => "slow_compute",
        }
    }

    fn arguments(&self) -> Value {
        match self.kind {
            Kind::Input => json!({ "filename": self.filename() }),
            _ => json!({ "seconds": self.seconds, "label": self.label() }),
        }
    }

    /// The terminal status this script implies.
    pub(crate) fn expected_status(&self) -> &'static str {
        match self.kind {
            Kind::Cancel => "cancelled",
            _ => "completed",
        }
    }

    /// What is wrong with `task` as this script's final state, if anything.
    pub(crate) fn check(&self, task: &Value) -> Result<(), String> {
        let status = status_of(task);
        if status != self.expected_status() {
            let detail = task
                .get("error")
                .map(|e| format!(" (error {e})"))
                .unwrap_or_default();
            return Err(format!(
                "status {status:?}, expected {:?}{detail}",
                self.expected_status()
            ));
        }
        let expected_text = match self.kind {
            Kind::Quick | Kind::Slow => {
                format!("Computed {} in {} s.", self.label(), self.seconds)
            }
            Kind::Input => format!("Deleted {}.", self.filename()),
            Kind::Cancel => return Ok(()),
        };
        let text = task
            .pointer("/result/content/0/text")
            .and_then(Value::as_str);
        if text != Some(expected_text.as_str()) {
            return Err(format!("result text {text:?}, expected {expected_text:?}"));
        }
        if task.pointer("/result/isError") == Some(&json!(true)) {
            return Err("result has isError: true".into());
        }
        Ok(())
    }
}

/// What a script saw.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) script: Script,
    /// Set once a `tools/call` answered with a task.
    pub(crate) task_id: Option<String>,
    /// The last snapshot `tasks/get` returned.
    pub(crate) last_seen: Option<Value>,
    /// Why the script stopped early.
    pub(crate) error: Option<String>,
}

/// Why a request was given up.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A definite answer that retrying will not change (not found, invalid params, …).
    Rejected(ClientError),
    /// Retried until the deadline; the last error.
    Deadline(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Rejected(e) => write!(f, "{e}"),
            Failure::Deadline(last) => write!(f, "still failing at the deadline (last: {last})"),
        }
    }
}

#[derive(Debug)]
pub(crate) enum Request<'a> {
    Call {
        tool: &'a str,
        arguments: Value,
        key: &'a str,
    },
    Get(&'a str),
    Update(&'a str, Value),
    Cancel(&'a str),
}

/// Every replica, and the count of requests sent again.
#[derive(Debug)]
pub(crate) struct Api {
    clients: Vec<Client>,
    pub(crate) retries: AtomicU64,
}

impl Api {
    pub(crate) fn new(urls: &[String]) -> Self {
        Self {
            clients: urls.iter().map(Client::with_tasks).collect(),
            retries: AtomicU64::new(0),
        }
    }

    /// Sends `request` to a random replica, and again to another one after a transport
    /// error, a timeout, HTTP 5xx or 429, with a growing, jittered backoff, until
    /// `deadline`.
    pub(crate) async fn send(
        &self,
        rng: &mut StdRng,
        request: &Request<'_>,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        let n = self.clients.len();
        let mut failed_on: Option<usize> = None;
        let mut attempt: u32 = 0;
        let mut last = String::from("not sent");
        loop {
            if Instant::now() >= deadline {
                return Err(Failure::Deadline(last));
            }
            let mut i = rng.random_range(0..n);
            if let Some(f) = failed_on
                && n > 1
                && i == f
            {
                i = (f + 1 + rng.random_range(0..n - 1)) % n;
            }
            let client = &self.clients[i];
            let limit = PER_REQUEST.min(deadline.saturating_duration_since(Instant::now()));
            match tokio::time::timeout(limit, once(client, request)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if retryable(&e) => last = format!("replica {i}: {e}"),
                Ok(Err(e)) => return Err(Failure::Rejected(e)),
                Err(_) => last = format!("replica {i}: no answer within {limit:?}"),
            }
            failed_on = Some(i);
            self.retries.fetch_add(1, Ordering::Relaxed);
            attempt += 1;
            let base =
                Duration::from_millis(50 * (1 << attempt.min(5))).min(Duration::from_secs(1));
            let pause = base.mul_f64(rng.random_range(0.5..1.0));
            tokio::time::sleep(pause).await;
        }
    }

    /// Polls `tasks/get` every 200 ms until `done` holds.
    async fn poll_until(
        &self,
        rng: &mut StdRng,
        id: &str,
        deadline: Instant,
        last_seen: &mut Option<Value>,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        loop {
            let task = self
                .send(rng, &Request::Get(id), deadline)
                .await
                .map_err(|f| format!("tasks/get: {f}"))?;
            *last_seen = Some(task.clone());
            if done(&task) {
                return Ok(task);
            }
            if Instant::now() + POLL >= deadline {
                return Err(format!("still {:?} at the deadline", status_of(&task)));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Runs one script to its end (or its deadline).
    pub(crate) async fn run(&self, script: Script, deadline: Instant) -> Outcome {
        let mut outcome = Outcome {
            script,
            task_id: None,
            last_seen: None,
            error: None,
        };
        if let Err(e) = self.drive(&mut outcome, deadline).await {
            outcome.error = Some(e);
        }
        outcome
    }

    async fn drive(&self, outcome: &mut Outcome, deadline: Instant) -> Result<(), String> {
        let script = outcome.script.clone();
        let mut rng = StdRng::seed_from_u64(script.seed);
        let call = Request::Call {
            tool: script.tool(),
            arguments: script.arguments(),
            key: &script.key,
        };
        let created = self
            .send(&mut rng, &call, deadline)
            .await
            .map_err(|f| format!("tools/call: {f}"))?;
        let id = match (
            created.get("resultType").and_then(Value::as_str),
            created.get("taskId").and_then(Value::as_str),
        ) {
            (Some("task"), Some(id)) => id.to_owned(),
            _ => return Err(format!("tools/call answered without a task: {created}")),
        };
        outcome.task_id = Some(id.clone());
        let seen = &mut outcome.last_seen;
        match script.kind {
            Kind::Quick | Kind::Slow => {}
            Kind::Input => {
                let task = self
                    .poll_until(&mut rng, &id, deadline, seen, |t| status_of(t) != "working")
                    .await?;
                if status_of(&task) != "input_required" {
                    return Err(format!(
                        "expected input_required, the task went {:?}",
                        status_of(&task)
                    ));
                }
                if task.pointer("/inputRequests/confirm_delete").is_none() {
                    return Err(format!(
                        "input_required without the confirm_delete request: {task}"
                    ));
                }
                let answer = json!({
                    "confirm_delete": { "action": "accept", "content": { "confirm": true } }
                });
                self.send(&mut rng, &Request::Update(&id, answer), deadline)
                    .await
                    .map_err(|f| format!("tasks/update: {f}"))?;
            }
            Kind::Cancel => {
                tokio::time::sleep(script.cancel_after).await;
                self.send(&mut rng, &Request::Cancel(&id), deadline)
                    .await
                    .map_err(|f| format!("tasks/cancel: {f}"))?;
            }
        }
        self.poll_until(&mut rng, &id, deadline, seen, is_terminal)
            .await?;
        Ok(())
    }

    /// The task as any live replica shows it now.
    pub(crate) async fn resolve(
        &self,
        rng: &mut StdRng,
        id: &str,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        self.send(rng, &Request::Get(id), deadline).await
    }
}

async fn once(client: &Client, request: &Request<'_>) -> Result<Value, ClientError> {
    match request {
        Request::Call {
            tool,
            arguments,
            key,
        } => {
            client
                .call_tool_idempotent(tool, arguments.clone(), key)
                .await
        }
        Request::Get(id) => client.get_task(id).await,
        Request::Update(id, responses) => client.update_task(id, responses.clone()).await,
        Request::Cancel(id) => client.cancel_task(id).await,
    }
}

/// Whether another replica, a moment later, may answer differently: the connection
/// failed or the answer was lost, the replica or the database is down (5xx, 503), or
/// the replica asks us to slow down (429).
fn retryable(e: &ClientError) -> bool {
    match e {
        ClientError::Http(_) => true,
        ClientError::NotJsonRpc { status, .. } | ClientError::Rpc { status, .. } => {
            *status >= 500 || *status == 429
        }
        ClientError::Denied { .. } | ClientError::Auth(_) | ClientError::Unexpected(_) => false,
    }
}
