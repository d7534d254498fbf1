//! `mcp-tasks migrate`: applies the embedded migrations.

use anyhow::Context;

use super::args::Database;

pub(super) async fn run(database: Database) -> anyhow::Result<()> {
    let store = database.connect().await?;
    store.migrate().await.context("migrating")?;
    tracing::info!("migrations applied");
    Ok(())
}
