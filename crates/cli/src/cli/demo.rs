//! `mcp-tasks demo`: the lessons' demo sequence against a running server.

use clap::Args;

#[derive(Debug, Args)]
pub(super) struct DemoCommand {
    /// The server's MCP endpoint.
    #[arg(
        long,
        env = "MCP_TASKS_URL",
        default_value = "http://127.0.0.1:8080/mcp"
    )]
    url: String,
}

pub(super) async fn run(command: DemoCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    let mut log = std::io::stderr();
    mcp_tasks_client::run_demo(&command.url, &mut out, &mut log).await?;
    Ok(())
}
