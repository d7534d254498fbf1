//! The process's Prometheus registry, and what a scrape reads from the database.

use std::sync::Arc;
use std::time::Duration;

use std::fmt::Write as _;

use mcp_tasks_store::{ClaimLimits, SharedStore};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::names::{self, Kind};

/// Scrapes closer together than this share one database sample: every replica and
/// worker serves the gauges, so a fleet of them scraped often stays cheap.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// The same for the per-tenant and held-back families, which read more.
const SAMPLE_QUEUE_EVERY: Duration = Duration::from_secs(10);
/// Queued tasks (oldest first) those families read at most: a scrape's cost is bounded
/// however long the queue (beyond it, the younger tasks count only in `other`).
const QUEUE_SAMPLE_ROWS: i64 = 100_000;

/// What limits claims, for the held-back family (the scheduling policy over the tools
/// the process knows now).
pub type LimitsSource = Arc<dyn Fn() -> ClaimLimits + Send + Sync>;

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
    limits: std::sync::Mutex<Option<LimitsSource>>,
    sampled_at: Mutex<Option<Instant>>,
    /// The families of [`names::SAMPLED_FAMILIES`] as last sampled, and when.
    queue: Mutex<(Option<Instant>, String)>,
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
            if names::SAMPLED_FAMILIES.contains(name) {
                continue;
            }
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
                limits: std::sync::Mutex::new(None),
                sampled_at: Mutex::new(None),
                queue: Mutex::new((None, String::new())),
            }),
        })
    }

    /// The same registry, sampling the task table and the pool of `store` at scrapes.
    pub fn with_store(&self, store: SharedStore) -> Self {
        Self {
            inner: Arc::new(Inner {
                handle: self.inner.handle.clone(),
                store: Some(store),
                limits: std::sync::Mutex::new(self.limits()),
                sampled_at: Mutex::new(None),
                queue: Mutex::new((None, String::new())),
            }),
        }
    }

    /// From now on, counts what `limits` hold back (`mcp_tasks_held_back`), in every
    /// clone of this registry.
    pub fn set_limits(&self, limits: LimitsSource) {
        *self.inner.limits.lock().unwrap_or_else(|e| e.into_inner()) = Some(limits);
    }

    fn limits(&self) -> Option<LimitsSource> {
        self.inner
            .limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The Prometheus text exposition, after refreshing the sampled gauges.
    pub async fn render(&self) -> String {
        let mut queue = String::new();
        if let Some(store) = &self.inner.store {
            let depth = sample(store, &self.inner.sampled_at).await;
            let limits = self.limits();
            queue = sample_queue(store, limits.as_ref(), depth, &self.inner.queue).await;
        }
        self.inner.handle.run_upkeep();
        let mut text = self.inner.handle.render();
        text.push_str(&queue);
        text
    }
}

/// Refreshes the gauges from the database at most every [`SAMPLE_EVERY`]; returns the
/// queue's depth when it read it.
async fn sample(store: &SharedStore, sampled_at: &Mutex<Option<Instant>>) -> Option<i64> {
    let pool = store.pool_stats();
    metrics::gauge!(names::DB_POOL_CONNECTIONS, "state" => "active").set(f64::from(pool.active));
    metrics::gauge!(names::DB_POOL_CONNECTIONS, "state" => "idle").set(f64::from(pool.idle));
    metrics::gauge!(names::DB_POOL_CONNECTIONS, "state" => "max").set(f64::from(pool.max));

    let mut last = sampled_at.lock().await;
    if last.is_some_and(|at| at.elapsed() < SAMPLE_EVERY) {
        return None;
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
            Some(stats.queue_depth)
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot sample the task table");
            None
        }
    }
}

/// The families of [`names::SAMPLED_FAMILIES`], read again at most every
/// [`SAMPLE_QUEUE_EVERY`] (and only along with the queue's depth, which `other` needs).
async fn sample_queue(
    store: &SharedStore,
    limits: Option<&LimitsSource>,
    depth: Option<i64>,
    cached: &Mutex<(Option<Instant>, String)>,
) -> String {
    let mut cached = cached.lock().await;
    let due = cached.0.is_none_or(|at| at.elapsed() >= SAMPLE_QUEUE_EVERY);
    let Some(depth) = depth.filter(|_| due) else {
        return cached.1.clone();
    };
    cached.0 = Some(Instant::now());
    let tenants = match store.queue_by_tenant(QUEUE_SAMPLE_ROWS).await {
        Ok(tenants) => tenants,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot sample the queue by tenant");
            return cached.1.clone();
        }
    };
    let held = match limits {
        Some(limits) => match store.held_back(&limits(), QUEUE_SAMPLE_ROWS).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: cannot count what the limits hold back");
                return cached.1.clone();
            }
        },
        None => Vec::new(),
    };
    cached.1 = exposition(&tenants, depth, &held);
    cached.1.clone()
}

/// The text of the sampled families: the [`names::TOP_TENANTS`] deepest tenants and
/// `other` (the queue's depth less theirs; the oldest of the rest), and each reached
/// limit's held-back count.
fn exposition(
    tenants: &[mcp_tasks_store::TenantQueue],
    depth: i64,
    held: &[mcp_tasks_store::HeldBack],
) -> String {
    let (top, rest) = tenants.split_at(tenants.len().min(names::TOP_TENANTS));
    let shown: i64 = top.iter().map(|t| t.depth).sum();
    let other_age = rest.iter().map(|t| t.oldest_age).max().unwrap_or_default();
    let mut out = String::new();
    let help = |name: &str| {
        names::ALL
            .iter()
            .find(|(n, ..)| *n == name)
            .map_or("", |(.., help)| *help)
    };
    for name in [names::TENANT_QUEUE_DEPTH, names::TENANT_QUEUE_OLDEST_AGE] {
        let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} gauge", help(name));
        for t in top {
            let value = if name == names::TENANT_QUEUE_DEPTH {
                t.depth as f64
            } else {
                t.oldest_age.as_secs_f64()
            };
            let _ = writeln!(out, "{name}{{tenant=\"{}\"}} {value}", escape(&t.tenant));
        }
        let other = if name == names::TENANT_QUEUE_DEPTH {
            (depth - shown).max(0) as f64
        } else {
            other_age.as_secs_f64()
        };
        let _ = writeln!(out, "{name}{{tenant=\"other\"}} {other}");
    }
    let name = names::HELD_BACK;
    let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} gauge", help(name));
    for h in held {
        let _ = writeln!(
            out,
            "{name}{{limit=\"{}\",name=\"{}\"}} {}",
            escape(&h.limit),
            escape(&h.name),
            h.tasks
        );
    }
    out
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mcp_tasks_store::{HeldBack, TenantQueue};

    use super::*;

    fn tenant(name: &str, depth: i64, age_s: u64) -> TenantQueue {
        TenantQueue {
            tenant: name.to_owned(),
            depth,
            oldest_age: Duration::from_secs(age_s),
        }
    }

    #[test]
    fn the_deepest_tenants_get_series_and_the_rest_are_other() {
        let mut tenants: Vec<TenantQueue> = (0..12)
            .map(|i| tenant(&format!("t{i:02}"), 100 - i, 10 + i as u64))
            .collect();
        tenants.push(tenant("evil\"\n", 1, 99));
        let held = [HeldBack {
            limit: "tool".into(),
            name: "slow".into(),
            tasks: 7,
        }];
        // 13 tenants read, 2,000 queued in all.
        let text = exposition(&tenants, 2_000, &held);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let depth: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("mcp_tasks_tenant_queue_depth{"))
            .collect();
        assert_eq!(depth.len(), names::TOP_TENANTS + 1, "{text}");
        assert!(text.contains("mcp_tasks_tenant_queue_depth{tenant=\"t00\"} 100\n"));
        let shown: i64 = (0..10).map(|i| 100 - i).sum();
        assert!(text.contains(&format!(
            "mcp_tasks_tenant_queue_depth{{tenant=\"other\"}} {}\n",
            2_000 - shown
        )));
        // The oldest of the rest: the escaped tenant's 99 s.
        assert!(text.contains("mcp_tasks_tenant_queue_oldest_age_seconds{tenant=\"other\"} 99\n"));
        assert!(!text.contains("evil"));
        assert!(text.contains("mcp_tasks_held_back{limit=\"tool\",name=\"slow\"} 7\n"));
        assert!(text.contains("# TYPE mcp_tasks_held_back gauge\n"));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
