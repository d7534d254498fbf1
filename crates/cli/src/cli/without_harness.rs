//! `bench` and `chaos` in a build without the `harness` feature (the serving binary, as
//! the image and `cargo install` build it): hidden from `--help`, they say how to get a
//! build that has them instead of running.

use clap::Args;

/// Whatever follows the command, not read.
#[derive(Debug, Args)]
pub(super) struct Absent {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    _args: Vec<String>,
}

pub(super) fn refuse(command: &str) -> anyhow::Result<()> {
    anyhow::bail!(
        "`mcp-tasks {command}` is not in this build: the harnesses (bench, chaos) come with the `harness` feature, which a workspace build has (`cargo build` at the repository's root); or build the binary with `cargo build --release -p mcp-tasks --features harness`"
    )
}
