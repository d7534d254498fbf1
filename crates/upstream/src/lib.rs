//! Upstream MCP servers as durable tool sources.
//!
//! The configuration file names upstream servers (a stdio child process or a Streamable
//! HTTP endpoint); each becomes a set of [`mcp_tasks_tools::Tool`]s whose handlers forward
//! `tools/call` to the upstream, so the replicas and workers treat them like any other tool.

mod call;
mod catalog;
pub mod config;
mod connection;
mod declared;
mod forward;
mod input;
mod routing;
mod stdio;
mod upstream_task;

pub use catalog::{Options, StartError, Upstreams};
pub use config::scheduling::{self, Limits, Order, Scheduling, TenantPolicy};
pub use config::{
    Config, ConfigError, DEFAULT_MAX_RESULT_BYTES, INHERITED_ENV, ToolSettings, Transport,
    UpstreamConfig,
};
