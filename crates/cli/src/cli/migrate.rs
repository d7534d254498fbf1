//! `mcp-tasks migrate`: applies the embedded migrations, waiting a while for a database
//! that is not up yet (started beside it, as in compose, or failing over).

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use mcp_tasks_wire::backoff::Backoff;

use super::args::Database;

#[derive(Debug, Args)]
pub(super) struct MigrateCommand {
    #[command(flatten)]
    database: Database,
    /// How long to keep trying while the database cannot be reached (seconds).
    #[arg(long, env = "MCP_TASKS_MIGRATE_WAIT_SECONDS", default_value_t = 60)]
    wait_seconds: u64,
}

pub(super) async fn run(command: MigrateCommand) -> anyhow::Result<()> {
    let store = command.database.connect().await?;
    let deadline = Instant::now() + Duration::from_secs(command.wait_seconds);
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        match store.migrate().await {
            Ok(()) => break,
            Err(e) if e.is_unavailable() && Instant::now() < deadline => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, retry_ms = delay.as_millis() as u64, "the database cannot be reached yet; migrating again soon");
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e).context("migrating"),
        }
    }
    tracing::info!("migrations applied");
    Ok(())
}
