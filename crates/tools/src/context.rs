//! What a handler can see and do during one run.

use std::sync::Arc;

use mcp_tasks_wire::ClientCapabilities;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{BoxFuture, ToolError};

/// Where a handler's side effects go: the task row (in a worker, fenced by its lease) or
/// nowhere (a synchronous call in a replica).
pub trait TaskSink: Send + Sync {
    fn set_status<'a>(&'a self, message: &'a str) -> BoxFuture<'a, Result<(), ContextError>>;
    fn save_checkpoint<'a>(
        &'a self,
        checkpoint: &'a Value,
    ) -> BoxFuture<'a, Result<(), ContextError>>;

    /// Shows `requests` as the task's `inputRequests` while the run goes on holding the
    /// task, and resolves with the answers, in order, once every one has arrived (see
    /// [`ToolContext::ask`]). Each request comes with the key it would like; the sink
    /// picks keys never issued for this task. A sink that cannot ask answers
    /// `Unavailable`.
    fn ask<'a>(
        &'a self,
        requests: &'a [(String, Value)],
    ) -> BoxFuture<'a, Result<Vec<Value>, ContextError>> {
        let _ = requests;
        Box::pin(async { Err(ContextError::Unavailable(NOT_A_TASK.into())) })
    }
}

const NOT_A_TASK: &str = "input can be asked for during a run only when it runs as a task";

/// A sink for runs that are not tasks: there is nobody to show a status to.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopSink;

impl TaskSink for NoopSink {
    fn set_status<'a>(&'a self, _message: &'a str) -> BoxFuture<'a, Result<(), ContextError>> {
        Box::pin(async { Ok(()) })
    }

    fn save_checkpoint<'a>(
        &'a self,
        _checkpoint: &'a Value,
    ) -> BoxFuture<'a, Result<(), ContextError>> {
        Box::pin(async { Ok(()) })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The run no longer owns the task (lease lost, cancelled, expired).
    #[error("this run no longer owns the task")]
    Interrupted,
    /// The write could not be made; the run may go on.
    #[error("could not record progress: {0}")]
    Unavailable(String),
}

impl From<ContextError> for ToolError {
    fn from(_: ContextError) -> Self {
        ToolError::Interrupted
    }
}

/// An answer to an `elicitation/create` input request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Elicitation<'a> {
    Accept(&'a Map<String, Value>),
    Decline,
    Cancel,
}

/// One run's view of its task. Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    inner: Arc<Inner>,
}

struct Inner {
    arguments: Value,
    responses: Map<String, Value>,
    checkpoint: Option<Value>,
    task_id: Option<String>,
    attempt: u32,
    trace_context: Map<String, Value>,
    cancel: CancellationToken,
    sink: Arc<dyn TaskSink>,
    client_capabilities: Option<ClientCapabilities>,
    owner: Option<String>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Arguments and answers are user data: never in Debug output.
        f.debug_struct("ToolContext")
            .field("task_id", &self.inner.task_id)
            .field("attempt", &self.inner.attempt)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    pub fn builder(arguments: Value) -> ToolContextBuilder {
        ToolContextBuilder {
            arguments,
            responses: Map::new(),
            checkpoint: None,
            task_id: None,
            attempt: 1,
            trace_context: Map::new(),
            cancel: CancellationToken::new(),
            sink: Arc::new(NoopSink),
            client_capabilities: None,
            owner: None,
        }
    }

    pub fn arguments(&self) -> &Value {
        &self.inner.arguments
    }

    /// A string argument, if present.
    pub fn str_arg(&self, name: &str) -> Option<&str> {
        self.inner.arguments.get(name).and_then(Value::as_str)
    }

    /// Every answer received so far, by input key.
    pub fn responses(&self) -> &Map<String, Value> {
        &self.inner.responses
    }

    pub fn response(&self, key: &str) -> Option<&Value> {
        self.inner.responses.get(key)
    }

    /// The answer to an elicitation, if one arrived under `key`.
    pub fn elicitation(&self, key: &str) -> Option<Elicitation<'_>> {
        let response = self.response(key)?;
        match response.get("action").and_then(Value::as_str)? {
            "accept" => Some(Elicitation::Accept(
                response
                    .get("content")
                    .and_then(Value::as_object)
                    .unwrap_or(&EMPTY),
            )),
            "decline" => Some(Elicitation::Decline),
            "cancel" => Some(Elicitation::Cancel),
            _ => None,
        }
    }

    /// What the calling client declared, so a handler can ask only for input the client
    /// can give: all of it for a run inside the replica that received the call (a
    /// sync-only tool); in a worker, the input kinds the client that created the task
    /// declared (`None` for a task created before they were kept). The kinds the tool
    /// declared with [`crate::ToolBuilder::asks_for`] were checked when the call arrived.
    pub fn client_capabilities(&self) -> Option<&ClientCapabilities> {
        self.inner.client_capabilities.as_ref()
    }

    /// The checkpoint saved by an earlier run of this task, if any.
    pub fn checkpoint(&self) -> Option<&Value> {
        self.inner.checkpoint.as_ref()
    }

    /// Whom the run is for: an opaque key, equal for two runs exactly when they run for
    /// the same tenant and principal (`None` when the caller did not say). A handler that
    /// shares a resource between runs (an upstream connection) keeps what it hears for
    /// one owner from reaching another.
    pub fn owner(&self) -> Option<&str> {
        self.inner.owner.as_deref()
    }

    /// The task id, when running as a task.
    pub fn task_id(&self) -> Option<&str> {
        self.inner.task_id.as_deref()
    }

    /// 1 for the first run of this leg; more when an earlier worker was lost.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The W3C trace context of this run (`traceparent`, and `tracestate` when there is
    /// one): what a tool passes on to the services it calls, so their spans join the
    /// trace of the `tools/call` that created the task. Empty when there is none.
    pub fn trace_context(&self) -> &Map<String, Value> {
        &self.inner.trace_context
    }

    /// The `traceparent` of this run, to send as that header.
    pub fn traceparent(&self) -> Option<&str> {
        self.inner.trace_context.get("traceparent")?.as_str()
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves when the run should stop: the client cancelled, the lease was lost, or
    /// the worker is shutting down.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await;
    }

    /// `Err(Interrupted)` once the run should stop, for use with `?`.
    pub fn check_cancelled(&self) -> Result<(), ToolError> {
        if self.is_cancelled() {
            Err(ToolError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// Sleeps, waking early with `Err(Interrupted)` if the run should stop.
    pub async fn sleep(&self, duration: std::time::Duration) -> Result<(), ToolError> {
        tokio::select! {
            () = tokio::time::sleep(duration) => Ok(()),
            () = self.cancelled() => Err(ToolError::Interrupted),
        }
    }

    /// Shows a status message on the task. A failure to record it is logged and
    /// ignored; only losing the task interrupts the run.
    pub async fn set_status(&self, message: &str) -> Result<(), ToolError> {
        match self.inner.sink.set_status(message).await {
            Ok(()) => Ok(()),
            Err(ContextError::Unavailable(why)) => {
                tracing::warn!(%why, "status message not recorded");
                Ok(())
            }
            Err(ContextError::Interrupted) => Err(ToolError::Interrupted),
        }
    }

    /// Asks the client for input without ending the run: the task shows `requests` (each
    /// a `{"method", "params"}` input request, with the key it would like) as its
    /// `inputRequests` and is `input_required`, while this run keeps the task (its lease,
    /// and whatever it holds open, such as a call to an upstream server). Resolves with
    /// the answers in the order asked once the client has answered every one (with
    /// `tasks/update`, on any replica), the task `working` again.
    ///
    /// For a handler that must keep something open while it waits. A handler that can
    /// pick up where it left off should return [`crate::Outcome::NeedInput`] instead,
    /// which frees the worker while the client thinks. If the worker is lost while
    /// waiting, the run is lost with it: the task is run again only if the tool is
    /// idempotent. `Err(Interrupted)` when the run should stop (cancelled, lease lost);
    /// `Err(Unavailable)` when asking is not possible here (a synchronous run) or the
    /// request could not be recorded.
    pub async fn ask(&self, requests: &[(String, Value)]) -> Result<Vec<Value>, ContextError> {
        if self.is_cancelled() {
            return Err(ContextError::Interrupted);
        }
        tokio::select! {
            answers = self.inner.sink.ask(requests) => answers,
            () = self.cancelled() => Err(ContextError::Interrupted),
        }
    }

    /// Saves a checkpoint that the next run of this task will see (after input, or after
    /// a lost worker). Unlike a status message, a checkpoint that was not saved is an
    /// error the handler must see.
    pub async fn save_checkpoint(&self, checkpoint: &Value) -> Result<(), ContextError> {
        self.inner.sink.save_checkpoint(checkpoint).await
    }
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

#[must_use]
pub struct ToolContextBuilder {
    arguments: Value,
    responses: Map<String, Value>,
    checkpoint: Option<Value>,
    task_id: Option<String>,
    attempt: u32,
    trace_context: Map<String, Value>,
    cancel: CancellationToken,
    sink: Arc<dyn TaskSink>,
    client_capabilities: Option<ClientCapabilities>,
    owner: Option<String>,
}

impl ToolContextBuilder {
    /// The tenant and principal the run is for (see [`ToolContext::owner`]).
    pub fn owner(mut self, tenant: &str, principal: &str) -> Self {
        // Length-prefixed, so no two (tenant, principal) pairs make the same key.
        self.owner = Some(format!("{}:{tenant}{principal}", tenant.len()));
        self
    }

    pub fn client_capabilities(mut self, capabilities: ClientCapabilities) -> Self {
        self.client_capabilities = Some(capabilities);
        self
    }

    pub fn responses(mut self, responses: Map<String, Value>) -> Self {
        self.responses = responses;
        self
    }

    pub fn checkpoint(mut self, checkpoint: Option<Value>) -> Self {
        self.checkpoint = checkpoint;
        self
    }

    pub fn task_id(mut self, id: impl Into<String>) -> Self {
        self.task_id = Some(id.into());
        self
    }

    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    pub fn trace_context(mut self, context: Map<String, Value>) -> Self {
        self.trace_context = context;
        self
    }

    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    pub fn sink(mut self, sink: Arc<dyn TaskSink>) -> Self {
        self.sink = sink;
        self
    }

    pub fn build(self) -> ToolContext {
        ToolContext {
            inner: Arc::new(Inner {
                arguments: self.arguments,
                responses: self.responses,
                checkpoint: self.checkpoint,
                task_id: self.task_id,
                attempt: self.attempt,
                trace_context: self.trace_context,
                cancel: self.cancel,
                sink: self.sink,
                client_capabilities: self.client_capabilities,
                owner: self.owner,
            }),
        }
    }
}
