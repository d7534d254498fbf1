//! The `mcp-tasks` binary's code: command-line parsing and process wiring, plus the
//! throwaway PostgreSQL cluster that `dev` (and the tests) can start.

pub mod cli;
pub mod devdb;
