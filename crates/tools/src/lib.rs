//! Tools: how to define one, and the packs this service ships.
//!
//! A tool is a descriptor (what `tools/list` shows), an [`ExecutionPolicy`] (where it may
//! run), limits (attempts, TTL), and an async handler. Handlers follow an
//! *end-and-re-enter* model: a handler that needs input returns
//! [`Outcome::NeedInput`]; when the answers arrive the handler is run again from the
//! start, on any worker, with every answer so far and the last checkpoint it saved. No
//! process ever waits on a client. A tool declares the kinds of input it may ask for
//! ([`InputKind`]), so a client that could not answer is refused before anything runs.
//!
//! Next to the tools, the registry holds a [`catalog::Catalog`] of resources, prompts and
//! completions, put together from [`catalog::Provider`]s (a pack's fixed
//! [`catalog::StaticProvider`], or any other source).
//!
//! ```no_run
//! use mcp_tasks_tools::{ExecutionPolicy, Outcome, Tool};
//! use serde_json::json;
//!
//! let tool = Tool::builder("echo")
//!     .description("Echoes its input")
//!     .input_schema(json!({"type":"object","properties":{"text":{"type":"string"}}}))
//!     .policy(ExecutionPolicy::TaskOptional)
//!     .handler(|ctx| async move {
//!         let text = ctx.arguments()["text"].as_str().unwrap_or_default().to_owned();
//!         Ok(Outcome::text(text))
//!     })
//!     .build()
//!     .expect("valid tool");
//! ```

pub mod catalog;
mod context;
mod input;
mod limits;
mod live;
mod outcome;
pub mod packs;
mod registry;
pub mod scheduling;
mod tool;

pub use context::{ContextError, Elicitation, NoopSink, TaskSink, ToolContext, ToolContextBuilder};
pub use input::{InputRequests, validate_input_response};
pub use limits::claim_limits;
pub use live::LiveRegistry;
pub use outcome::{BoxFuture, Outcome, ToolError, ToolResult};
pub use registry::{Registry, RegistryError};
pub use tool::{ExecutionPolicy, InputKind, Preflight, Tool, ToolBuilder};
