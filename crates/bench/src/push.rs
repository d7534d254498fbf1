//! Push latency and the memory of idle listen streams, against a real replica process.
//!
//! - **Latency**: `streams` clients each listen to one task; the benchmark changes the
//!   tasks (as a worker would, through the store) at `rate` changes per second and times
//!   each change from the moment its commit returned to the moment the frame reached the
//!   client. Baseline, same run: a bare NOTIFY from one connection to a LISTEN on another,
//!   timed the same way.
//! - **Memory**: the replica's resident memory before and after opening `idle_streams`
//!   listen streams, per stream. Baseline, same run: the same number of idle TCP
//!   connections to the same replica.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{self, StreamExt};
use mcp_tasks_client::{Client, Subscription};
use mcp_tasks_spawn::{Logs, Process, Spawn};
use mcp_tasks_store::{Lease, NewTask, Owner, PoolConfig, Store, TaskId};
use serde_json::{Map, Value, json};
use tokio::sync::{Mutex, oneshot};
use tokio::task::JoinSet;

use crate::scratch::{self, ScratchDatabase};
use crate::stats::Summary;

#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    /// The `mcp-tasks` executable to run the replica with.
    pub binary: PathBuf,
    pub streams: usize,
    pub changes: usize,
    /// Changes per second.
    pub rate: u32,
    pub idle_streams: usize,
}

/// The owner a replica without authentication gives every caller.
fn anonymous() -> Owner {
    Owner::new("default", "anonymous")
}

pub async fn run(config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    let db = ScratchDatabase::create(
        &config.database_url,
        &PoolConfig {
            max_connections: 20,
            ..PoolConfig::default()
        },
    )
    .await?;
    let result = async {
        let replica = Replica::start(&config.binary, &db.url).await?;
        writeln!(
            out,
            "push: replica pid {} at {}; {} streams, {} changes at {}/s, {} idle streams",
            replica.pid, replica.url, config.streams, config.changes, config.rate, config.idle_streams
        )?;
        let raw = notify_baseline(&db, config.changes.min(2000), config.rate).await?;
        let push = push_latency(config, &db.store, &replica.url).await?;
        writeln!(out, "push: baseline, bare NOTIFY to LISTEN, from statement sent:  {}", raw.from_sent)?;
        writeln!(out, "push: baseline, bare NOTIFY to LISTEN, from commit returned: {}", raw.from_commit)?;
        writeln!(out, "push: change to frame at the client, from statement sent:    {}", push.latencies.from_sent)?;
        writeln!(out, "push: change to frame at the client, from commit returned:   {}", push.latencies.from_commit)?;
        writeln!(
            out,
            "push: frames received {} of {} changes ({} coalesced into a later snapshot)",
            push.received,
            config.changes,
            config.changes - push.received
        )?;
        writeln!(
            out,
            "push: ratio to baseline (from statement sent): p50 {:.2}x, p99 {:.2}x",
            ratio(push.latencies.from_sent.p50, raw.from_sent.p50),
            ratio(push.latencies.from_sent.p99, raw.from_sent.p99)
        )?;
        replica.stop().await;
        let memory = idle_memory(config, &db.store, &db.url).await?;
        writeln!(
            out,
            "push: baseline, idle TCP connection:      {:.1} KiB each ({} connections, replica RSS +{:.1} MiB)",
            memory.per_connection / 1024.0,
            config.idle_streams,
            memory.connections_total / 1_048_576.0
        )?;
        writeln!(
            out,
            "push: idle listen stream:                 {:.1} KiB each ({} streams, replica RSS +{:.1} MiB)",
            memory.per_stream / 1024.0,
            memory.streams,
            memory.streams_total / 1_048_576.0
        )?;
        writeln!(
            out,
            "push: ratio to baseline: {:.2}x the memory of an idle connection",
            memory.per_stream / memory.per_connection.max(1.0)
        )?;
        anyhow::Ok(())
    }
    .await;
    db.drop_database().await?;
    result
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// The replica under test, killed when dropped.
struct Replica {
    process: Process,
    pid: u32,
    url: String,
    addr: SocketAddr,
}

impl Replica {
    async fn start(binary: &Path, database_url: &str) -> anyhow::Result<Self> {
        let process = Spawn::new(binary)
            .name("replica")
            .args(["serve", "--listen", "127.0.0.1:0", "--tools", "demo"])
            .env("DATABASE_URL", database_url)
            .env("MCP_TASKS_LOG", "warn,mcp_tasks::cli=info")
            .env("MCP_TASKS_LOG_FORMAT", "text")
            .env("MCP_TASKS_MAX_STREAMS_PER_PRINCIPAL", "1000000")
            .env("MCP_TASKS_RATE_LIMIT", "0")
            .env("MCP_TASKS_DB_MAX_CONNECTIONS", "16")
            .logs(Logs::Problems)
            .ready_within(Duration::from_secs(30))
            .start()
            .await?;
        let addr = process
            .listen()
            .context("the replica's ready line has no address")?;
        Ok(Self {
            pid: process.pid(),
            url: format!("http://{addr}/mcp"),
            addr,
            process,
        })
    }

    /// Resident memory in bytes.
    fn rss(&self) -> anyhow::Result<f64> {
        let bytes = self.process.rss().context("VmRSS")?;
        Ok(bytes as f64)
    }

    async fn stop(mut self) {
        self.process.kill().await;
    }
}

async fn notify_baseline(
    db: &ScratchDatabase,
    samples: usize,
    rate: u32,
) -> anyhow::Result<Latencies> {
    let channel = "mcp_tasks_bench_raw";
    let mut listener = db.listener(channel).await?;
    let (tx, rx) = oneshot::channel();
    let mut receiver = JoinSet::new();
    receiver.spawn(async move {
        let mut got: HashMap<usize, Instant> = HashMap::new();
        while got.len() < samples {
            match tokio::time::timeout(Duration::from_secs(10), listener.recv()).await {
                Ok(Ok(n)) => {
                    if let Ok(i) = n.payload().parse() {
                        got.insert(i, Instant::now());
                    }
                }
                _ => break,
            }
        }
        let _ = tx.send(got);
    });
    let every = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let mut sent = HashMap::new();
    for i in 0..samples {
        let before = Instant::now();
        scratch::notify(&db.sql, channel, &i.to_string()).await?;
        sent.insert(i, (before, Instant::now()));
        tokio::time::sleep(every).await;
    }
    let got = rx.await?;
    while let Some(joined) = receiver.join_next().await {
        joined?;
    }
    Latencies::of(&sent, &got).context("no NOTIFY was received")
}

/// Latency of each change measured two ways: from when its statement was sent (an upper
/// bound: it includes executing the statement) and from when its commit returned (a lower
/// bound: the frame can race the statement's own reply, which counts as zero).
struct Latencies {
    from_sent: Summary,
    from_commit: Summary,
}

impl Latencies {
    fn of(
        sent: &HashMap<usize, (Instant, Instant)>,
        got: &HashMap<usize, Instant>,
    ) -> Option<Self> {
        let pairs: Vec<(Duration, Duration)> = sent
            .iter()
            .filter_map(|(i, (before, after))| {
                got.get(i).map(|t1| {
                    (
                        t1.saturating_duration_since(*before),
                        t1.saturating_duration_since(*after),
                    )
                })
            })
            .collect();
        Some(Self {
            from_sent: Summary::of(pairs.iter().map(|p| p.0).collect())?,
            from_commit: Summary::of(pairs.iter().map(|p| p.1).collect())?,
        })
    }
}

struct PushResult {
    latencies: Latencies,
    received: usize,
}

async fn create_tasks(store: &Store, n: usize) -> anyhow::Result<Vec<TaskId>> {
    let owner = anonymous();
    let ids = stream::iter(0..n)
        .map(|_| {
            let (store, owner) = (store.clone(), owner.clone());
            async move {
                store
                    .replica()
                    .create_task(
                        &owner,
                        NewTask {
                            tool: "generate_report".into(),
                            arguments: json!({}),
                            status_message: Some("bench".into()),
                            ttl_ms: Some(3_600_000),
                            poll_interval_ms: Some(1000),
                            retention_ms: 60_000,
                            max_attempts: 1,
                            input_responses: Map::new(),
                            trace_context: None,
                            client_capabilities: None,
                            idempotency: None,
                        },
                    )
                    .await
                    .map(|t| t.id)
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    ids.into_iter().map(|r| r.map_err(Into::into)).collect()
}

/// Opens one listen stream per task and reads each one's ack and first snapshot.
async fn open_streams(url: &str, ids: &[TaskId]) -> anyhow::Result<Vec<(TaskId, Subscription)>> {
    let client = Arc::new(Client::with_tasks(url));
    let opened = stream::iter(ids.iter().copied())
        .map(|id| {
            let client = client.clone();
            async move {
                let mut sub = client
                    .listen(
                        json!(id.to_string()),
                        json!({ "taskIds": [id.to_string()] }),
                    )
                    .await?;
                for _ in 0..2 {
                    sub.next()
                        .await?
                        .context("stream ended before its snapshot")?;
                }
                anyhow::Ok((id, sub))
            }
        })
        .buffer_unordered(100)
        .collect::<Vec<_>>()
        .await;
    opened.into_iter().collect()
}

async fn push_latency(config: &Config, store: &Store, url: &str) -> anyhow::Result<PushResult> {
    let ids = create_tasks(store, config.streams).await?;
    let leases: HashMap<TaskId, Lease> = store
        .worker()
        .claim("bench", i64::try_from(config.streams)?, 3_600_000)
        .await?
        .into_iter()
        .map(|c| (c.lease.id, c.lease))
        .collect();
    anyhow::ensure!(leases.len() == ids.len(), "could not claim every task");
    let subscriptions = open_streams(url, &ids).await?;

    let arrivals: Arc<Mutex<HashMap<usize, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut readers = JoinSet::new();
    for (_, mut sub) in subscriptions {
        let arrivals = arrivals.clone();
        readers.spawn(async move {
            while let Ok(Some(frame)) = sub.next().await {
                let at = Instant::now();
                if let Some(seq) = frame
                    .pointer("/params/statusMessage")
                    .and_then(Value::as_str)
                    .and_then(|m| m.strip_prefix("bench "))
                    .and_then(|s| s.parse::<usize>().ok())
                {
                    arrivals.lock().await.insert(seq, at);
                }
            }
        });
    }

    // Changes go out at a steady rate from a few writers, round-robin over the tasks.
    let leases: Arc<Vec<Lease>> = Arc::new(ids.iter().map(|id| leases[id].clone()).collect());
    let commits: Arc<Mutex<HashMap<usize, (Instant, Instant)>>> =
        Arc::new(Mutex::new(HashMap::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now();
    let every = Duration::from_secs_f64(1.0 / f64::from(config.rate.max(1)));
    let mut writers = JoinSet::new();
    for _ in 0..8 {
        let (store, leases, commits, next) =
            (store.clone(), leases.clone(), commits.clone(), next.clone());
        let changes = config.changes;
        writers.spawn(async move {
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= changes {
                    return anyhow::Ok(());
                }
                tokio::time::sleep_until(start + every * u32::try_from(seq)?).await;
                let lease = &leases[seq % leases.len()];
                let before = Instant::now();
                let changed = store
                    .worker()
                    .set_status_message(lease, &format!("bench {seq}"))
                    .await?;
                let after = Instant::now();
                anyhow::ensure!(changed, "the bench lost a lease");
                commits.lock().await.insert(seq, (before, after));
            }
        });
    }
    while let Some(joined) = writers.join_next().await {
        joined??;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while arrivals.lock().await.len() < config.changes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    readers.abort_all();
    let arrivals = arrivals.lock().await;
    let commits = commits.lock().await;
    Ok(PushResult {
        received: arrivals.len(),
        latencies: Latencies::of(&commits, &arrivals).context("no frame arrived")?,
    })
}

struct Memory {
    per_connection: f64,
    connections_total: f64,
    per_stream: f64,
    streams_total: f64,
    streams: usize,
}

async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Each measurement gets a fresh replica: memory freed by an earlier one would otherwise
/// be reused and hide the cost of the later one.
async fn idle_memory(config: &Config, store: &Store, database_url: &str) -> anyhow::Result<Memory> {
    let n = config.idle_streams;
    let ids = create_tasks(store, n).await?;

    let replica = Replica::start(&config.binary, database_url).await?;
    settle().await;
    let before = replica.rss()?;
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        sockets.push(tokio::net::TcpStream::connect(&replica.addr).await?);
    }
    settle().await;
    let connections_total = replica.rss()? - before;
    drop(sockets);
    replica.stop().await;

    let replica = Replica::start(&config.binary, database_url).await?;
    // Warm the replica up with one stream, so one-off costs (the hub's first use, the
    // LISTEN connection) are not charged to the idle streams.
    drop(open_streams(&replica.url, &ids[..1]).await?);
    settle().await;
    let before = replica.rss()?;
    let streams = open_streams(&replica.url, &ids).await?;
    settle().await;
    let streams_total = replica.rss()? - before;
    let opened = streams.len();
    drop(streams);
    replica.stop().await;
    Ok(Memory {
        per_connection: connections_total / n as f64,
        connections_total,
        per_stream: streams_total / opened.max(1) as f64,
        streams_total,
        streams: opened,
    })
}
