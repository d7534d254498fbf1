//! The `--failover` fault: a synchronous standby beside the primary, every process given
//! both hosts, and once, around the middle, the primary lost as in a crash (immediate
//! shutdown) and the standby promoted (what a managed database's failover does). How long each replica was without a
//! writable database is measured from the promotion.

use std::time::Duration;

use anyhow::{Context, bail};
use mcp_tasks_devdb::DevDatabase;
use sqlx::postgres::{PgPool, PgPoolOptions};
use time::OffsetDateTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::audit::AuditDb;

/// The standby's name, which the primary's `synchronous_standby_names` lists.
const STANDBY: &str = "standby";
/// How long a replica may take to be ready again before the harness gives up on it.
const BACK_WITHIN: Duration = Duration::from_secs(60);

fn pool(db: &DevDatabase) -> anyhow::Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(db.url())?)
}

/// A standby of `primary` that every commit on it waits for.
pub(crate) async fn synchronous_standby(primary: &DevDatabase) -> anyhow::Result<DevDatabase> {
    // A base backup and a start, a second or two: before the chaos, nothing else waits.
    let standby =
        tokio::task::block_in_place(|| primary.standby(STANDBY)).context("starting a standby")?;
    let sql = pool(primary)?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'"
    )))
    .execute(&sql)
    .await?;
    sqlx::query("SELECT pg_reload_conf()").execute(&sql).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
        )
        .bind(STANDBY)
        .fetch_optional(&sql)
        .await?;
        if state.as_deref() == Some("sync") {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the standby did not become synchronous within 30 s ({state:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sql.close().await;
    Ok(standby)
}

/// `DATABASE_URL` for the processes: both hosts, the primary first.
pub(crate) fn url(primary: &DevDatabase, standby: &DevDatabase) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    )
}

/// What a failover cost.
#[derive(Debug)]
pub(crate) struct FailedOver {
    /// Wall clock when the primary was told to stop, and when every replica was ready.
    pub(crate) stopped_at: OffsetDateTime,
    pub(crate) back_at: OffsetDateTime,
    /// How long after the promotion the slowest replica was ready.
    pub(crate) slowest: Duration,
}

/// Crashes the primary, promotes the standby, moves the audit there, and waits until every
/// replica is ready again. Returns the new primary.
pub(crate) async fn fail_over(
    mut primary: DevDatabase,
    standby: DevDatabase,
    replicas: &[String],
    audit_db: &AuditDb,
    t0: Instant,
) -> anyhow::Result<(DevDatabase, FailedOver)> {
    let t = || t0.elapsed().as_secs_f64();
    eprintln!(
        "[chaos] t={:.1}s failover: the primary crashes (immediate shutdown)",
        t()
    );
    let stopped_at = OffsetDateTime::now_utc();
    let stopped = Instant::now();
    primary = tokio::task::spawn_blocking(move || {
        primary.crash();
        primary
    })
    .await?;
    let sql = pool(&standby)?;
    let promoted: bool = sqlx::query_scalar("SELECT pg_promote(wait => true)")
        .fetch_one(&sql)
        .await
        .context("promoting the standby")?;
    sql.close().await;
    if !promoted {
        bail!("the standby was not promoted within 60 s");
    }
    let promoted = Instant::now();
    eprintln!(
        "[chaos] t={:.1}s failover: standby promoted {:.2} s after the crash",
        t(),
        (promoted - stopped).as_secs_f64()
    );
    audit_db.move_to(standby.url())?;
    let mut ready = tokio::task::JoinSet::new();
    for url in replicas {
        let readyz = url.replace("/mcp", "/readyz");
        ready.spawn(async move {
            let deadline = promoted + BACK_WITHIN;
            while !is_ready(&readyz).await {
                if Instant::now() >= deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(promoted.elapsed())
        });
    }
    let mut windows = Vec::new();
    while let Some(back) = ready.join_next().await {
        windows.push(back?.context("a replica was not ready again within 60 s of the promotion")?);
    }
    let slowest = windows.iter().max().copied().unwrap_or_default();
    eprintln!(
        "[chaos] t={:.1}s failover: every replica ready on the new primary within {:.2} s of the promotion",
        t(),
        slowest.as_secs_f64()
    );
    drop(primary);
    Ok((
        standby,
        FailedOver {
            stopped_at,
            back_at: OffsetDateTime::now_utc(),
            slowest,
        },
    ))
}

/// `GET /readyz` answered 200 (a replica's readiness is its database's: see the README).
async fn is_ready(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let Some((host, path)) = rest.split_once('/') else {
        return false;
    };
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        stream
            .write_all(
                format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await?;
        std::io::Result::Ok(head.starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(3), ask).await,
        Ok(Ok(true))
    )
}
