//! The benchmarks stay runnable: tiny runs of each, checking they report every figure.

use std::time::Duration;

use crate::harness::procs;

fn database_url() -> String {
    crate::harness::db::server_url()
}

/// A benchmark run to its end (a generous bound: they measure for seconds at a time).
async fn run(args: &[&str]) -> String {
    let url = database_url();
    let out = procs::output(
        procs::mcp_tasks(args, &[("DATABASE_URL", &url), ("MCP_TASKS_LOG", "warn")]),
        Duration::from_secs(1800),
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn notify_cost_reports_every_design_and_the_ratio() {
    let out = run(&[
        "bench",
        "notify-cost",
        "--clients",
        "2",
        "--tasks",
        "20",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
    ])
    .await;
    for line in [
        "no trigger (baseline)",
        "ours, unwatched",
        "ours, all watched",
        "NOTIFY always",
        "ours (unwatched) vs NOTIFY always:",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[tokio::test]
async fn push_reports_latency_memory_and_ratios() {
    let out = run(&[
        "bench",
        "push",
        "--streams",
        "10",
        "--changes",
        "60",
        "--rate",
        "200",
        "--idle-streams",
        "20",
    ])
    .await;
    for line in [
        "from commit returned",
        "of 60 changes",
        "ratio to baseline (from statement sent)",
        "idle listen stream:",
        "the memory of an idle connection",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[tokio::test]
async fn console_reports_every_page_beside_its_baseline_and_every_plan() {
    let out = run(&["bench", "console", "--short"]).await;
    for line in [
        "console: loaded 20000 tasks",
        "console baseline (new connection + statement)",
        "console list ",
        "console task page",
        "console inbox",
        "console health",
        "console plan principal health percentiles",
        "console plan admin     list ",
        "target: every console page renders from a cold start",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(
        !out.contains("SEQUENTIAL SCAN"),
        "a page scans the table:\n{out}"
    );
}
