//! The MCP 2026-07-28 wire format and the Tasks extension (`io.modelcontextprotocol/tasks`).
//!
//! This crate does no I/O. It turns bytes and header values into typed messages and back,
//! builds the results and notifications the server sends, and names every constant the
//! rest of the service must agree on. `tests/spec.rs` checks it against the official MCP
//! material copied into `tests/official`: what it builds (tasks in every status, task
//! notifications, the listen acknowledgement and result, discover, lists, input-required
//! results, every error code) is valid under the core and Tasks extension JSON Schemas,
//! and every official request, notification, response and error example reads through it.

pub mod backoff;
pub mod error;
pub mod headers;
pub mod json;
pub mod jsonrpc;
pub mod listen;
pub mod meta;
pub mod param_headers;
pub mod requested_schema;
pub mod results;
pub mod secret;
pub mod service_messages;
pub mod strict;
pub mod tasks;
pub mod time_fmt;

pub use error::{ErrorObject, codes};
pub use jsonrpc::{ClientResponse, Incoming, Notification, Request, RequestId, Response};
pub use meta::{ClientCapabilities, RequestMeta};
pub use tasks::{RawTaskView, SerializedResult, TaskStatus, TaskView};

/// The only protocol revision this service speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Every revision `server/discover` advertises. The 2025 revisions are negotiated with
/// `initialize` instead, and served through sessions (the server's `session` module).
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];

/// Extension identifier of the official Tasks extension.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Reserved `_meta` keys.
pub mod meta_keys {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// The 2025-11-25 key that must never appear on an inlined task result.
    pub const LEGACY_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
}
