//! `mcp-tasks health`: the container health check. Images ship no curl or shell, so the
//! binary itself asks a replica whether it is ready.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

#[derive(Debug, Args)]
pub(super) struct HealthCommand {
    /// The replica to check: its base URL or MCP endpoint (its `/readyz` is asked), or a
    /// full `/readyz` or `/healthz` URL.
    #[arg(
        long,
        env = "MCP_TASKS_HEALTH_URL",
        default_value = "http://127.0.0.1:8080/readyz"
    )]
    url: String,
    /// How long to wait for the answer (ms).
    #[arg(long, env = "MCP_TASKS_HEALTH_TIMEOUT_MS", default_value_t = 3000)]
    timeout_ms: u64,
}

pub(super) async fn run(command: HealthCommand) -> anyhow::Result<()> {
    let url = probe_url(&command.url)?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(command.timeout_ms))
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(url.as_str())
        .send()
        .await
        .with_context(|| format!("{url} did not answer"))?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        bail!("{url} answered {status}");
    }
    Ok(())
}

/// `/readyz` at the URL's origin unless the URL already names a probe.
fn probe_url(raw: &str) -> anyhow::Result<url::Url> {
    let mut url = url::Url::parse(raw).with_context(|| format!("--url {raw:?} is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("--url {raw:?} is not an http(s) URL");
    }
    let path = url.path().trim_end_matches('/');
    if !(path.ends_with("/readyz") || path.ends_with("/healthz")) {
        url.set_path("/readyz");
        url.set_query(None);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::probe_url;

    #[test]
    fn probe_url_asks_readyz_unless_a_probe_is_named() {
        let cases = [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/readyz"),
            ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/readyz"),
            ("http://h:1/readyz", "http://h:1/readyz"),
            ("http://h:1/healthz", "http://h:1/healthz"),
        ];
        for (given, want) in cases {
            assert_eq!(probe_url(given).expect(given).as_str(), want, "{given}");
        }
        assert!(probe_url("ftp://h/").is_err());
        assert!(probe_url("not a url").is_err());
    }
}
