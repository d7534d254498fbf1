//! The `mcp-tasks` binary, built inside this package so the integration tests can start
//! real processes (and kill them) through `CARGO_BIN_EXE_mcp-tasks-under-test`. It is the
//! same code as the shipped binary: both are `mcp_tasks::App::new().run()`.

fn main() -> std::process::ExitCode {
    mcp_tasks::App::new().run()
}
