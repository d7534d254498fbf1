//! What the scheduling figures and the connection budget look like from outside: the
//! queue by tenant and what the limits hold back on `/metrics`, and the budget each
//! process logs at start-up.

use std::time::Duration;

use serde_json::Value;

use super::{Logged, PACK, series, wait_metrics};
use crate::harness::http::client;
use crate::harness::procs::Proc;
use crate::harness::{TestDb, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_by_tenant_and_what_limits_hold_back_are_on_metrics() {
    use mcp_tasks_store::Owner;
    use mcp_tasks_store::testing::{Seed, SeedState};

    let db = TestDb::new().await;
    let now = time::OffsetDateTime::now_utc();
    let mut seeds = Vec::new();
    for _ in 0..30 {
        seeds.push(Seed::new(Owner::new("heavy", "p"), "slow_compute"));
    }
    // The light tenant's oldest has waited a minute.
    for age in [60, 0] {
        seeds.push(Seed {
            state: SeedState::Queued {
                run_after: Some(now - time::Duration::seconds(age)),
            },
            ..Seed::new(Owner::new("light", "p"), "slow_compute")
        });
    }
    // Eleven tenants of one task each: eight of them fit in the ten series, three are
    // "other".
    for t in 0..11 {
        seeds.push(Seed::new(
            Owner::new(format!("small-{t:02}"), "p"),
            "slow_compute",
        ));
    }
    // One running: the tool's limit of 1 is reached.
    seeds.push(Seed {
        state: SeedState::Leased {
            worker: "w".into(),
            token: 1,
            expires_at: now + time::Duration::minutes(10),
        },
        attempt: 1,
        ..Seed::new(Owner::new("heavy", "p"), "slow_compute")
    });
    db.store.seed(seeds).await.expect("seed");

    let dir = std::env::temp_dir().join(format!("mcp-tasks-metrics-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let config = dir.join("limits.toml");
    std::fs::write(&config, "[tool.\"slow_compute\"]\nmax_concurrency = 1\n").expect("config");
    let config = config.display().to_string();
    let replica = Proc::serve(&db.url, PACK, &[("MCP_TASKS_CONFIG", &config)]).await;
    let http = client();
    let url = format!("http://{}/metrics", replica.addr.expect("addr"));
    let m = wait_metrics(&http, &url, "the queue by tenant", |m| {
        series(m, "mcp_tasks_queue_depth") == Some(43.0)
    })
    .await;
    let depth = |tenant: &str| {
        series(
            &m,
            &format!("mcp_tasks_tenant_queue_depth{{tenant=\"{tenant}\"}}"),
        )
    };
    assert_eq!(depth("heavy"), Some(30.0), "{m}");
    assert_eq!(depth("light"), Some(2.0));
    assert_eq!(depth("other"), Some(3.0));
    let shown = m
        .lines()
        .filter(|l| l.starts_with("mcp_tasks_tenant_queue_depth{"))
        .count();
    assert_eq!(shown, 11, "ten tenants and other: {m}");
    assert!(
        series(
            &m,
            "mcp_tasks_tenant_queue_oldest_age_seconds{tenant=\"light\"}"
        )
        .is_some_and(|age| (60.0..120.0).contains(&age)),
        "{m}"
    );
    assert_eq!(
        series(
            &m,
            "mcp_tasks_held_back{limit=\"tool\",name=\"slow_compute\"}"
        ),
        Some(43.0),
        "{m}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_says_how_many_connections_it_may_open_and_warns_when_they_do_not_fit() {
    let db = TestDb::new().await;
    let budget_line = |process: &Logged| {
        let process = process.lines.clone();
        async move {
            eventually(Duration::from_secs(30), "the connection budget", || async {
                process
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                    .find(|v| {
                        v["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with("connection budget"))
                    })
            })
            .await
        }
    };
    let worker = |max: &'static str| {
        let url = db.url.clone();
        async move {
            Logged::start(
                &["worker", "--tools", PACK, "--log-format", "json"],
                &[
                    ("DATABASE_URL", url.as_str()),
                    ("MCP_TASKS_DB_MAX_CONNECTIONS", max),
                    ("MCP_TASKS_CONCURRENCY", "1"),
                ],
            )
            .await
        }
    };
    let small = worker("4").await;
    let line = budget_line(&small).await;
    assert_eq!(line["level"], "INFO", "{line}");
    // The pool's 4, the probe's one, LISTEN and the wake-up duty.
    assert_eq!(line["this_process"], 7, "{line}");
    let allows = line["server_allows"].as_i64().expect("server_allows");
    assert!(allows > 0 && line["in_use"].as_i64().is_some(), "{line}");

    let greedy = worker("100000").await;
    let line = budget_line(&greedy).await;
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["this_process"], 100_003, "{line}");
    assert!(
        line["message"]
            .as_str()
            .is_some_and(|m| m.contains("put a pooler in front")),
        "{line}"
    );
}
