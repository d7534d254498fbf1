//! The `mcp-tasks` binary's code: command-line parsing and process wiring.

pub mod cli;
