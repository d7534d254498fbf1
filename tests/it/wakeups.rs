//! Wake-ups: one notification of new work wakes one idle worker's claim, not every idle
//! worker's (the wake-up duty: one idle worker per set of tools holds it, the others
//! queue for it).

use std::net::SocketAddr;
use std::time::Duration;

use mcp_tasks_store::DUTY_APPLICATION_NAME;

use crate::harness::procs::Proc;
use crate::harness::{TestDb, eventually};

const WORKERS: usize = 4;

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// Claim statements of one cause, summed over the workers; `None` while one of them does
/// not serve metrics yet.
async fn claims(http: &reqwest::Client, urls: &[String], cause: &str) -> Option<f64> {
    let series = format!("mcp_tasks_claim_statements_total{{cause=\"{cause}\"}} ");
    let mut total = 0.0;
    for url in urls {
        let text = http.get(url).send().await.ok()?.text().await.ok()?;
        total += text
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    Some(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_notification_wakes_one_of_the_idle_workers() {
    let db = TestDb::new().await;
    let http = reqwest::Client::new();
    let mut workers = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..WORKERS {
        let listen = free_port().to_string();
        // The backstop poll is ten minutes away: every claim below is a wake-up's.
        workers.push(
            Proc::worker(
                &db.url,
                "conformance",
                &[
                    ("MCP_TASKS_METRICS_LISTEN", &listen),
                    ("MCP_TASKS_POLL_MS", "600000"),
                ],
            )
            .await,
        );
        urls.push(format!("http://{listen}/metrics"));
    }
    let sql = db.pool.clone();
    eventually(
        Duration::from_secs(60),
        "every worker listening, one on duty and the others queued for it",
        || {
            let sql = sql.clone();
            async move {
                let (listening, on_duty, queued): (i64, i64, i64) = sqlx::query_as(
                    "SELECT
                         (SELECT count(*) FROM pg_stat_activity
                          WHERE datname = current_database()
                            AND application_name = 'mcp-tasks-listen'),
                         count(*) FILTER (WHERE l.granted),
                         count(*) FILTER (WHERE NOT l.granted)
                     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                     WHERE l.locktype = 'advisory'
                       AND a.datname = current_database() AND a.application_name = $1",
                )
                .bind(DUTY_APPLICATION_NAME)
                .fetch_one(&sql)
                .await
                .ok()?;
                let n = WORKERS as i64;
                (listening == n && on_duty == 1 && queued == n - 1).then_some(())
            }
        },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "every worker's first claim",
        || async { (claims(&http, &urls, "start").await? >= WORKERS as f64).then_some(()) },
    )
    .await;
    // Whatever the start-up woke (a new LISTEN connection resynchronises) has settled.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = claims(&http, &urls, "notified").await.expect("metrics");

    sqlx::query("SELECT pg_notify('mcp_tasks_runnable', '')")
        .execute(&sql)
        .await
        .expect("notify");
    eventually(
        Duration::from_secs(30),
        "the claim the notification caused",
        || async { (claims(&http, &urls, "notified").await? > before).then_some(()) },
    )
    .await;
    // A worker woken by the same notification would claim within milliseconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = claims(&http, &urls, "notified").await.expect("metrics");
    assert_eq!(
        after - before,
        1.0,
        "one notification, {WORKERS} idle workers: claims it caused"
    );

    // Whichever of them had the duty, once the others are gone the one left has it
    // (a dead worker's place in the queue ends with its connection) and is woken.
    let mut workers = workers.into_iter();
    for worker in workers.by_ref().take(WORKERS - 1) {
        worker.kill().await;
    }
    let last = vec![urls[WORKERS - 1].clone()];
    eventually(
        Duration::from_secs(30),
        "the worker left on duty, nobody else queued",
        || {
            let sql = sql.clone();
            async move {
                let (on_duty, queued): (i64, i64) = sqlx::query_as(
                    "SELECT count(*) FILTER (WHERE l.granted), count(*) FILTER (WHERE NOT l.granted)
                     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                     WHERE l.locktype = 'advisory'
                       AND a.datname = current_database() AND a.application_name = $1",
                )
                .bind(DUTY_APPLICATION_NAME)
                .fetch_one(&sql)
                .await
                .ok()?;
                (on_duty == 1 && queued == 0).then_some(())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = claims(&http, &last, "notified").await.expect("metrics");
    sqlx::query("SELECT pg_notify('mcp_tasks_runnable', '')")
        .execute(&sql)
        .await
        .expect("notify");
    eventually(
        Duration::from_secs(30),
        "the last worker's notified claim",
        || async { (claims(&http, &last, "notified").await? > before).then_some(()) },
    )
    .await;
    drop(workers);
}
