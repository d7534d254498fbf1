//! The embedding API: a binary of your own with your Rust tools and every subcommand of
//! `mcp-tasks` (`migrate`, `serve`, `worker`, `dev`, `demo`, ...), with the same flags
//! and environment variables. The `mcp-tasks` binary is `App::new().run()`.
//!
//! ```no_run
//! use mcp_tasks::App;
//! use mcp_tasks::tools::{Outcome, Tool};
//!
//! fn main() -> std::process::ExitCode {
//!     let hello = Tool::builder("hello")
//!         .description("Says hello")
//!         .handler(|_ctx| async { Ok(Outcome::text("hello")) })
//!         .build()
//!         .expect("a valid tool");
//!     App::new().default_packs("none").tool(hello).run()
//! }
//! ```
//!
//! [`App::run`] lives with the command tree it starts (`cli/mod.rs`), so that this module
//! is a leaf every subcommand may read its `App` from, handed down as an argument.

use mcp_tasks_tools::Tool;

/// What a binary serves besides the configuration file's upstreams.
#[derive(Debug, Clone)]
#[must_use]
pub struct App {
    pub(crate) tools: Vec<Tool>,
    /// `--tools` when neither the flag nor `MCP_TASKS_TOOLS` is given.
    pub(crate) default_packs: String,
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}

impl App {
    /// The built-in `demo` pack by default, nothing else.
    pub fn new() -> Self {
        Self {
            tools: Vec::new(),
            default_packs: "demo".into(),
        }
    }

    /// Adds one of your tools (served by `serve`, run by `worker`, both in `dev`).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// The built-in packs served when `--tools` is not given: `demo`, `conformance`,
    /// a comma-separated list, or `none`.
    pub fn default_packs(mut self, packs: impl Into<String>) -> Self {
        self.default_packs = packs.into();
        self
    }
}
