//! The `mcp-tasks` binary's code: command-line parsing and process wiring, and [`App`],
//! which gives a binary of your own the same subcommands with your tools.

mod app;
pub mod cli;

pub use app::App;
/// The tool API, for the tools you give [`App::tool`].
pub use mcp_tasks_tools as tools;
