//! Log set-up: one subscriber on stderr, text or JSON.

use anyhow::Context;
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum LogFormat {
    Text,
    Json,
}

pub(super) fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).context("MCP_TASKS_LOG")?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}
