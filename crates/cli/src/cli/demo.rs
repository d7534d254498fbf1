//! `mcp-tasks demo`: the demo sequence against a running server.

use clap::Args;

use super::args::Endpoint;

#[derive(Debug, Args)]
pub(super) struct DemoCommand {
    #[command(flatten)]
    endpoint: Endpoint,
}

pub(super) async fn run(command: DemoCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    let mut log = std::io::stderr();
    mcp_tasks_client::run_demo(&command.endpoint.url, &mut out, &mut log).await?;
    Ok(())
}
