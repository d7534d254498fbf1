//! The process's Prometheus registry, and what a scrape reads from the database.

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_store::SharedStore;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::names::{self, Kind};

/// Scrapes closer together than this share one database sample: every replica and
/// worker serves the gauges, so a fleet of them scraped often stays cheap.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Buckets (seconds) for request latencies and push lag: milliseconds matter.
const FAST: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 90.0,
];
/// Buckets (seconds) for waiting for a worker and for runs: up to an hour.
const SLOW: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The installed recorder, rendering `GET /metrics`. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    handle: PrometheusHandle,
    store: Option<SharedStore>,
    sampled_at: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Installs the process-wide recorder (once per process) and registers every metric
    /// of the contract, so that counters read 0 rather than missing before they move.
    pub fn install() -> Result<Self, String> {
        let mut builder = PrometheusBuilder::new();
        for (name, kind, _, _) in names::ALL {
            if *kind == Kind::Histogram {
                let buckets = match *name {
                    names::PICKUP_DELAY | names::TASK_DURATION => SLOW,
                    _ => FAST,
                };
                builder = builder
                    .set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
                    .map_err(|e| e.to_string())?;
            }
        }
        let handle = builder.install_recorder().map_err(|e| e.to_string())?;
        for (name, kind, _, help) in names::ALL {
            match kind {
                Kind::Counter => metrics::describe_counter!(*name, *help),
                Kind::Gauge => metrics::describe_gauge!(*name, *help),
                Kind::Histogram => metrics::describe_histogram!(*name, *help),
            }
        }
        for name in [names::LEASE_LAPSES, names::RECLAIMS, names::CRASH_RECOVERY] {
            metrics::counter!(name).increment(0);
        }
        Ok(Self {
            inner: Arc::new(Inner {
                handle,
                store: None,
                sampled_at: Mutex::new(None),
            }),
        })
    }

    /// The same registry, sampling the task table and the pool of `store` at scrapes.
    pub fn with_store(&self, store: SharedStore) -> Self {
        Self {
            inner: Arc::new(Inner {
                handle: self.inner.handle.clone(),
                store: Some(store),
                sampled_at: Mutex::new(None),
            }),
        }
    }

    /// The Prometheus text exposition, after refreshing the sampled gauges.
    pub async fn render(&self) -> String {
        if let Some(store) = &self.inner.store {
            sample(store, &self.inner.sampled_at).await;
        }
        self.inner.handle.run_upkeep();
        self.inner.handle.render()
    }
}

async fn sample(store: &SharedStore, sampled_at: &Mutex<Option<Instant>>) {
    let pool = store.pool_stats();
    metrics::gauge!(names::DB_POOL_CONNECTIONS, "state" => "active").set(f64::from(pool.active));
    metrics::gauge!(names::DB_POOL_CONNECTIONS, "state" => "idle").set(f64::from(pool.idle));
    metrics::gauge!(names::DB_POOL_CONNECTIONS, "state" => "max").set(f64::from(pool.max));

    let mut last = sampled_at.lock().await;
    if last.is_some_and(|at| at.elapsed() < SAMPLE_EVERY) {
        return;
    }
    // Also after a failure: a database that is down is not asked at every scrape.
    *last = Some(Instant::now());
    match store.task_stats().await {
        Ok(stats) => {
            for (status, count) in &stats.by_status {
                metrics::gauge!(names::TASKS, "status" => status.clone()).set(*count);
            }
            metrics::gauge!(names::QUEUE_DEPTH).set(stats.queue_depth as f64);
            metrics::gauge!(names::QUEUE_OLDEST_AGE).set(stats.queue_oldest_age.as_secs_f64());
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot sample the task table"),
    }
}
