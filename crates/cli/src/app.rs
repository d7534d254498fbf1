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

use std::sync::OnceLock;

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

/// The running binary's `App`: set once by [`App::run`], read by the flag group that
/// loads tools, so each subcommand keeps its own signature.
static CURRENT: OnceLock<App> = OnceLock::new();

pub(crate) fn current() -> &'static App {
    CURRENT.get_or_init(App::new)
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

    /// Parses the command line and runs the subcommand; the process's exit code.
    pub fn run(self) -> std::process::ExitCode {
        if CURRENT.set(self).is_err() {
            eprintln!("mcp-tasks: App::run may be called once per process");
            return std::process::ExitCode::FAILURE;
        }
        crate::cli::main()
    }
}
