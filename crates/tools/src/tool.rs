//! The tool definition and its builder.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::{BoxFuture, InputRequests, ToolContext, ToolResult};

/// Where a tool may run. The server decides per call; the client only declares whether
/// it supports tasks at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionPolicy {
    /// Runs inside the replica that received the call; never becomes a task.
    SyncOnly,
    /// Runs in a worker. A client that declared the Tasks extension gets a task; any
    /// other client gets the result synchronously (the replica waits, bounded).
    TaskOptional,
    /// Runs in a worker and only for clients that declared the Tasks extension; others
    /// get `-32021`.
    TaskRequired,
}

/// A kind of input request a tool may make, declared up front so that a call from a
/// client that could not answer it is refused before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `elicitation/create` in form mode.
    FormElicitation,
    /// `elicitation/create` in URL mode.
    UrlElicitation,
    /// `sampling/createMessage`.
    Sampling,
    /// `roots/list`.
    Roots,
}

impl InputKind {
    /// The method and params shape of such a request, for a capability check.
    pub fn probe(self) -> (&'static str, Value) {
        match self {
            Self::FormElicitation => ("elicitation/create", json!({ "mode": "form" })),
            Self::UrlElicitation => ("elicitation/create", json!({ "mode": "url" })),
            Self::Sampling => ("sampling/createMessage", json!({})),
            Self::Roots => ("roots/list", json!({})),
        }
    }

    /// The client capability that declares it, as `requiredCapabilities` names it.
    pub fn capability(self) -> Value {
        match self {
            Self::FormElicitation => json!({ "elicitation": {} }),
            Self::UrlElicitation => json!({ "elicitation": { "url": {} } }),
            Self::Sampling => json!({ "sampling": {} }),
            Self::Roots => json!({ "roots": {} }),
        }
    }
}

pub(crate) type HandlerFn = dyn Fn(ToolContext) -> BoxFuture<'static, ToolResult> + Send + Sync;

/// A check that runs in the replica before a task is created and may ask for input
/// first (MRTR). It sees the arguments and the answers gathered so far.
pub type Preflight = dyn Fn(&Value, &Map<String, Value>) -> Result<(), InputRequests> + Send + Sync;

/// A tool: descriptor, policy, limits and handler.
#[derive(Clone)]
pub struct Tool {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub policy: ExecutionPolicy,
    /// Runs allowed when workers are lost mid-run, before the task fails.
    pub max_attempts: u32,
    /// May a run lost with its worker be run again? When not, a lost run fails the task
    /// instead (a tool with side effects outside this service must not do them twice).
    pub idempotent: bool,
    /// Time to live from creation; `None` is unlimited.
    pub ttl: Option<Duration>,
    pub poll_interval: Duration,
    /// Client capabilities every call must declare (a `ClientCapabilities` object).
    pub required_capabilities: Option<Value>,
    /// `annotations` in `tools/list`.
    pub annotations: Option<Value>,
    /// Kinds of input request the tool may make; a client must be able to answer each.
    pub input_kinds: Vec<InputKind>,
    /// The source it belongs to (an upstream's name), whose limits in the configuration
    /// file it shares with the source's other tools.
    pub group: Option<String>,
    pub(crate) preflight: Option<Arc<Preflight>>,
    pub(crate) handler: Arc<HandlerFn>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .field("max_attempts", &self.max_attempts)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Tool {
    pub fn builder(name: impl Into<String>) -> ToolBuilder {
        ToolBuilder {
            name: name.into(),
            title: None,
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            policy: ExecutionPolicy::TaskOptional,
            max_attempts: 3,
            idempotent: true,
            ttl: Some(Duration::from_secs(3600)),
            poll_interval: Duration::from_secs(1),
            required_capabilities: None,
            input_kinds: Vec::new(),
            group: None,
            preflight: None,
            handler: None,
            annotations: None,
        }
    }

    /// The entry in `tools/list`.
    pub fn descriptor(&self) -> Value {
        let mut d = Map::new();
        d.insert("name".into(), json!(self.name));
        if let Some(title) = &self.title {
            d.insert("title".into(), json!(title));
        }
        d.insert("description".into(), json!(self.description));
        d.insert("inputSchema".into(), self.input_schema.clone());
        if let Some(out) = &self.output_schema {
            d.insert("outputSchema".into(), out.clone());
        }
        if let Some(annotations) = &self.annotations {
            d.insert("annotations".into(), annotations.clone());
        }
        Value::Object(d)
    }

    /// Runs the handler once.
    pub fn run(&self, ctx: ToolContext) -> BoxFuture<'static, ToolResult> {
        (self.handler)(ctx)
    }

    /// Runs the preflight check, if the tool has one.
    pub fn preflight(
        &self,
        arguments: &Value,
        responses: &Map<String, Value>,
    ) -> Result<(), InputRequests> {
        match &self.preflight {
            Some(check) => check(arguments, responses),
            None => Ok(()),
        }
    }
}

#[must_use]
pub struct ToolBuilder {
    name: String,
    title: Option<String>,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    policy: ExecutionPolicy,
    max_attempts: u32,
    idempotent: bool,
    ttl: Option<Duration>,
    poll_interval: Duration,
    required_capabilities: Option<Value>,
    input_kinds: Vec<InputKind>,
    group: Option<String>,
    preflight: Option<Arc<Preflight>>,
    handler: Option<Arc<HandlerFn>>,
    annotations: Option<Value>,
}

impl ToolBuilder {
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    pub fn policy(mut self, policy: ExecutionPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Whether a run lost with its worker may be run again (default: yes).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// The source the tool belongs to (an upstream's name): the limits the configuration
    /// file gives that source hold for all its tools together.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// `annotations` as `tools/list` shows them (hints for clients).
    pub fn annotations(mut self, annotations: Value) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// `None` means the task never expires.
    pub fn ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    pub fn requires_capabilities(mut self, capabilities: Value) -> Self {
        self.required_capabilities = Some(capabilities);
        self
    }

    /// Declares a kind of input request the tool may make (in its preflight, or in any
    /// run). Calls from clients that did not declare the matching capability are refused
    /// with `-32021` before a task exists.
    pub fn asks_for(mut self, kind: InputKind) -> Self {
        if !self.input_kinds.contains(&kind) {
            self.input_kinds.push(kind);
        }
        self
    }

    pub fn preflight(
        mut self,
        check: impl Fn(&Value, &Map<String, Value>) -> Result<(), InputRequests> + Send + Sync + 'static,
    ) -> Self {
        self.preflight = Some(Arc::new(check));
        self
    }

    pub fn handler<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |ctx| Box::pin(handler(ctx))));
        self
    }

    pub fn build(self) -> Result<Tool, String> {
        let name = self.name;
        let handler = self
            .handler
            .ok_or_else(|| format!("tool {name:?} has no handler"))?;
        if name.is_empty() || name.len() > 128 {
            return Err(format!("tool name {name:?} must be 1 to 128 characters"));
        }
        if self.input_schema.get("type") != Some(&json!("object")) {
            return Err(format!(
                "tool {name:?}: inputSchema must have \"type\": \"object\""
            ));
        }
        if self.max_attempts == 0 {
            return Err(format!("tool {name:?}: max_attempts must be at least 1"));
        }
        if self.ttl.is_some_and(|t| t.as_millis() == 0) || self.poll_interval.as_millis() == 0 {
            return Err(format!(
                "tool {name:?}: ttl and poll interval must be at least 1 ms"
            ));
        }
        Ok(Tool {
            name,
            title: self.title,
            description: self.description,
            input_schema: self.input_schema,
            output_schema: self.output_schema,
            policy: self.policy,
            max_attempts: self.max_attempts,
            idempotent: self.idempotent,
            annotations: self.annotations,
            ttl: self.ttl,
            poll_interval: self.poll_interval,
            required_capabilities: self.required_capabilities,
            input_kinds: self.input_kinds,
            group: self.group,
            preflight: self.preflight,
            handler,
        })
    }
}
