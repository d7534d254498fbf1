//! Log set-up: one subscriber on stderr, text or JSON, and trace export when the
//! `OTEL_*` variables ask for it.

use clap::ValueEnum;
use opentelemetry_sdk::trace::SdkTracerProvider;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum LogFormat {
    Text,
    Json,
}

pub(super) fn init_logging(
    filter: &str,
    format: LogFormat,
    provider: Option<&SdkTracerProvider>,
) -> anyhow::Result<()> {
    let format = match format {
        LogFormat::Text => mcp_tasks_observe::logs::LogFormat::Text,
        LogFormat::Json => mcp_tasks_observe::logs::LogFormat::Json,
    };
    mcp_tasks_observe::logs::init(filter, format, provider)
        .map_err(|e| anyhow::anyhow!("MCP_TASKS_LOG: {e}"))
}
