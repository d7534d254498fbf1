//! Load from outside: the same request sent by `wrk` (Debian's, in C, its own process),
//! beside the built-in generator, so the figures do not rest on a load generator of
//! ours sharing this process. Each answer is checked (HTTP 200, no JSON-RPC `error`) in a
//! `response` hook; what fails counts as an error.
//!
//! Without `wrk` on the PATH (CI installs it), the scenarios say so and go on.

use std::process::Stdio;
use std::time::Duration;

use uuid::Uuid;

use crate::load::{Run, Target};
use crate::stats::Summary;

/// Whether `wrk` can be run here.
pub(crate) async fn available() -> bool {
    // `wrk` without a URL prints its usage and exits 1; a missing program is an error.
    tokio::process::Command::new("wrk")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok()
}

/// The Lua script that sends `request` (the raw bytes the built-in generator sends) and
/// checks each answer.
fn script(request: &[u8]) -> anyhow::Result<String> {
    let text = std::str::from_utf8(request)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("a request without a head"))?;
    anyhow::ensure!(
        !body.contains("]==]"),
        "the body cannot be quoted in the script"
    );
    let mut lua = format!("wrk.method = \"POST\"\nwrk.body = [==[{body}]==]\n");
    // wrk writes Host and Content-Length itself.
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        lua.push_str(&format!("wrk.headers[\"{name}\"] = [==[{value}]==]\n"));
    }
    lua.push_str(
        r#"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0 end
function response(status, headers, body)
  if status ~= 200 or string.find(body, '"error"', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local failed = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout
  for _, t in ipairs(threads) do failed = failed + t:get("bad") end
  io.write(string.format(
    "MCPTASKS requests=%d failed=%d us=%d p50=%d p90=%d p99=%d max=%d\n",
    summary.requests, failed, summary.duration, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max))
end
"#,
    );
    Ok(lua)
}

/// `request` from `connections` keep-alive connections for `duration` (whole seconds, at
/// least one) to `target`.
pub(crate) async fn drive(
    target: &Target,
    request: &[u8],
    connections: usize,
    duration: Duration,
) -> anyhow::Result<Run> {
    let file = std::env::temp_dir().join(format!("mcp-tasks-wrk-{}.lua", Uuid::new_v4()));
    std::fs::write(&file, script(request)?)?;
    let seconds = duration.as_secs_f64().ceil().max(1.0) as u64;
    let threads = connections.clamp(1, 2);
    let output = tokio::process::Command::new("wrk")
        .arg(format!("--threads={threads}"))
        .arg(format!("--connections={connections}"))
        .arg(format!("--duration={seconds}s"))
        .arg(format!("--script={}", file.display()))
        .arg(target.url())
        .stdin(Stdio::null())
        .output()
        .await;
    let _ = std::fs::remove_file(&file);
    let output = output?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "wrk failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    parse(&stdout)
}

/// The run from the line the script's `done` writes.
fn parse(stdout: &str) -> anyhow::Result<Run> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("MCPTASKS "))
        .ok_or_else(|| anyhow::anyhow!("wrk printed no summary: {stdout}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no {name} in {line}"))
    };
    let requests = field("requests")?;
    let failed = field("failed")?.min(requests);
    let us = |name: &str| field(name).map(Duration::from_micros);
    Ok(Run {
        ok: requests - failed,
        errors: failed,
        elapsed: us("us")?,
        latency: Some(Summary {
            count: usize::try_from(requests).unwrap_or(usize::MAX),
            p50: us("p50")?,
            p90: us("p90")?,
            p99: us("p99")?,
            max: us("max")?,
        }),
        first_error: (failed > 0)
            .then(|| "an answer was not 200 or was a JSON-RPC error".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_sends_the_request_as_the_built_in_generator_does() {
        let target = Target::parse("http://127.0.0.1:8080/mcp").expect("target");
        let lua = script(&target.request("tasks/get", "x", r#"{"a":1}"#)).expect("script");
        assert!(lua.contains("wrk.body = [==[{\"a\":1}]==]"), "{lua}");
        assert!(lua.contains("wrk.headers[\"Mcp-Method\"] = [==[tasks/get]==]"));
        assert!(!lua.contains("Content-Length") && !lua.contains("\"Host\""));
    }

    #[test]
    fn the_summary_line_is_a_run() {
        let run = parse("Running 1s test\nMCPTASKS requests=1000 failed=10 us=2000000 p50=900 p90=1500 p99=3000 max=9000\n")
            .expect("parse");
        assert_eq!((run.ok, run.errors), (990, 10));
        assert!((run.rate() - 495.0).abs() < 1e-6);
        assert_eq!(
            run.latency.expect("latency").p99,
            Duration::from_micros(3000)
        );
    }
}
