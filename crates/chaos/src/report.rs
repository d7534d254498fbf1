//! The verdict: every accepted script's task resolved and compared with what its script
//! implies, every lost run accounted for, and the summary, the recovery line and the
//! failed checks printed from the counts.

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::StdRng;
use serde_json::Value;
use tokio::time::Instant;

use crate::EXAMPLES;
use crate::actions::ChaosCounts;
use crate::analysis;
use crate::driver::{Api, Failure, Outcome};

/// Resolves every accepted script's task through `tasks/get`, compares it with what
/// the script implies, and accounts for every run the task lost.
pub(crate) async fn check_outcomes(
    api: &Api,
    rng: &mut StdRng,
    outcomes: &[Outcome],
    histories: &HashMap<String, analysis::History>,
    explainer: &analysis::Explainer<'_>,
    report: &mut Report,
) {
    let mut examples: HashMap<&str, usize> = HashMap::new();
    let mut example = |report: &mut Report, what: &'static str, line: String| {
        let n = examples.entry(what).or_default();
        *n += 1;
        if *n <= EXAMPLES {
            report.examples.push(format!("{what}: {line}"));
        }
    };
    let no_history = analysis::History::default();
    for o in outcomes {
        let script = &o.script;
        let name = format!("script {} ({})", script.index, script.kind.name());
        if let Some(error) = &o.error {
            report.script_errors += 1;
            example(report, "script error", format!("{name}: {error}"));
        }
        let Some(id) = o.task_id.as_deref() else {
            report.never_accepted += 1;
            example(report, "never accepted", name);
            continue;
        };
        report.accepted += 1;
        let deadline = Instant::now() + Duration::from_secs(60);
        let task = match api.resolve(rng, id, deadline).await {
            Ok(task) => task,
            Err(Failure::Rejected(e)) => {
                report.lost += 1;
                example(
                    report,
                    "lost",
                    format!("{name}: task {id}: tasks/get says {e}"),
                );
                continue;
            }
            Err(e @ Failure::Deadline(_)) => {
                report.lost += 1;
                example(report, "lost", format!("{name}: task {id}: tasks/get {e}"));
                continue;
            }
        };
        report.resolved += 1;

        let crash_recovery = is_crash_recovery(&task);
        let history = histories.get(id).unwrap_or(&no_history);
        let lost_runs = history.lost_runs(explainer);
        report.lost_runs += lost_runs.len() as u64;
        let unexplained: Vec<&analysis::LostRun> =
            lost_runs.iter().filter(|r| r.cause.is_none()).collect();
        for run in &unexplained {
            report.unexplained_lost_runs += 1;
            report.unexplained_own_reclaims += u64::from(run.own_reclaim());
            example(
                report,
                "unexplained lost run",
                format!("{name}: task {id}: {run}"),
            );
        }

        let status = mcp_tasks_client::status_of(&task);
        if let Some(seen) = &o.last_seen
            && mcp_tasks_client::is_terminal(seen)
            && mcp_tasks_client::status_of(seen) != status
        {
            report.wrong_state += 1;
            example(
                report,
                "wrong state",
                format!(
                    "{name}: task {id} was {:?} to the script, is {status:?} now",
                    mcp_tasks_client::status_of(seen)
                ),
            );
            continue;
        }
        if let Err(why) = script.check(&task) {
            // A task whose last runs were all lost is failed by design (CRASH_RECOVERY
            // after max_attempts lost runs): the state its script implies, provided the
            // chaos explains every one of those losses.
            let runs: Vec<String> = lost_runs.iter().map(ToString::to_string).collect();
            if crash_recovery && lost_runs.len() >= analysis::MAX_ATTEMPTS && unexplained.is_empty()
            {
                report.crash_recovery += 1;
                example(
                    report,
                    "crash recovery (explained)",
                    format!("{name}: task {id}: {why}; {}", runs.join("; ")),
                );
            } else {
                report.wrong_state += 1;
                example(
                    report,
                    "wrong state",
                    format!("{name}: task {id}: {why}; lost runs: [{}]", runs.join("; ")),
                );
            }
        }
    }
}

fn is_crash_recovery(task: &Value) -> bool {
    mcp_tasks_client::status_of(task) == "failed"
        && task.pointer("/error/data/reason").and_then(Value::as_str) == Some("CRASH_RECOVERY")
}

#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) seed: u64,
    pub(crate) tasks: usize,
    pub(crate) lease_ms: u64,
    pub(crate) accepted: usize,
    pub(crate) resolved: u64,
    pub(crate) lost: u64,
    pub(crate) wrong_state: u64,
    pub(crate) crash_recovery: u64,
    pub(crate) lost_runs: u64,
    pub(crate) unexplained_lost_runs: u64,
    /// Of those, runs started by a worker reclaiming its own lapsed lease.
    pub(crate) unexplained_own_reclaims: u64,
    pub(crate) never_accepted: u64,
    pub(crate) script_errors: u64,
    pub(crate) duplicates: u64,
    pub(crate) double_finalized: i64,
    pub(crate) overwritten: i64,
    pub(crate) left_terminal: i64,
    pub(crate) leases_held: i64,
    pub(crate) claims: i64,
    pub(crate) unexpected_exits: u64,
    pub(crate) chaos: ChaosCounts,
    pub(crate) recoveries_ms: Vec<i64>,
    pub(crate) held_not_reclaimed: u64,
    pub(crate) retries: u64,
    pub(crate) log_warn: u64,
    pub(crate) log_error: u64,
    pub(crate) kinds: Vec<String>,
    pub(crate) examples: Vec<String>,
    pub(crate) duration: Duration,
}

/// How soon after a promotion every replica must be ready on the new primary (issue 23's
/// target for the write unavailability window).
const FAILOVER_WITHIN_MS: i64 = 5_000;

/// The workers' maintenance round (their default, which the fleet keeps) and how many
/// of them a maintenance leader's term lasts.
const MAINTENANCE_ROUND_MS: u64 = 1_000;
const LEADER_TERM_ROUNDS: u64 = 3;

impl Report {
    fn percentile(&self, p: f64) -> Option<i64> {
        let v = &self.recoveries_ms;
        if v.is_empty() {
            return None;
        }
        let i = ((v.len() - 1) as f64 * p).round() as usize;
        Some(v[i])
    }

    pub(crate) fn summary(&self) -> String {
        let ms = |v: Option<i64>| v.map_or_else(|| "na".to_owned(), |v| v.to_string());
        format!(
            "chaos: seed={} tasks={} accepted={} resolved={} lost={} wrong_state={} double_finalized={} overwritten={} left_terminal={} leases_held={} never_accepted={} duplicates={} script_errors={} lost_runs={} unexplained_lost_runs={} crash_recovery={} unexpected_exits={} replica_kills={} worker_kills={} listener_kills={} pg_restarts={} failovers={} failover_ms={} recovery_ms_p50={} recovery_ms_max={} duration_s={:.1}",
            self.seed,
            self.tasks,
            self.accepted,
            self.resolved,
            self.lost,
            self.wrong_state,
            self.double_finalized,
            self.overwritten,
            self.left_terminal,
            self.leases_held,
            self.never_accepted,
            self.duplicates,
            self.script_errors,
            self.lost_runs,
            self.unexplained_lost_runs,
            self.crash_recovery,
            self.unexpected_exits,
            self.chaos.replica_kills,
            self.chaos.worker_kills,
            self.chaos.listener_kills,
            self.chaos.pg_restarts,
            self.chaos.failovers,
            ms(self.chaos.failover_ms),
            ms(self.percentile(0.5)),
            ms(self.recoveries_ms.last().copied()),
            self.duration.as_secs_f64()
        )
    }

    pub(crate) fn recovery_line(&self) -> String {
        let lease = self.lease_ms;
        // A lapsed lease waits for the maintenance leader's next round (the workers'
        // default of 1 s); when the dead worker was the leader, first for its term to run
        // out (three rounds).
        let round = MAINTENANCE_ROUND_MS;
        let bound = lease + round;
        let leader_bound = bound + LEADER_TERM_ROUNDS * round;
        let (Some(p50), Some(max)) = (self.percentile(0.5), self.recoveries_ms.last()) else {
            return format!(
                "chaos: no worker was killed while holding a task, so recovery was not measured (bound: lease {lease} ms + a maintenance round {round} ms = {bound} ms, {leader_bound} ms when the dead worker led maintenance)"
            );
        };
        let above = self
            .recoveries_ms
            .iter()
            .filter(|&&ms| ms > leader_bound as i64)
            .count();
        format!(
            "chaos: a dead worker's task was reclaimed after p50 {p50} ms, max {max} ms, over {} reclaims (bound: lease {lease} ms + a maintenance round {round} ms = {bound} ms, + the leader's term {} ms = {leader_bound} ms when the dead worker led maintenance; heartbeats renew the lease every {} ms, so {}–{lease} ms of it remain at the kill; {above} above the bound)",
            self.recoveries_ms.len(),
            LEADER_TERM_ROUNDS * round,
            lease / 3,
            lease - lease / 3,
        )
    }

    /// The checks that failed.
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let mut check = |name: &str, n: i64| {
            if n != 0 {
                failed.push(format!("{name}={n}"));
            }
        };
        check("lost", self.lost as i64);
        check("wrong_state", self.wrong_state as i64);
        check("double_finalized", self.double_finalized);
        check("overwritten", self.overwritten);
        check("left_terminal", self.left_terminal);
        check("leases_held", self.leases_held);
        check("never_accepted", self.never_accepted as i64);
        check("duplicates", self.duplicates as i64);
        check("script_errors", self.script_errors as i64);
        check("unexplained_lost_runs", self.unexplained_lost_runs as i64);
        check("unexpected_exits", self.unexpected_exits as i64);
        if self.chaos.pg_restarts + self.chaos.failovers != 1 {
            failed.push(format!(
                "pg_restarts={} failovers={} (expected one of them)",
                self.chaos.pg_restarts, self.chaos.failovers
            ));
        }
        if let Some(ms) = self.chaos.failover_ms
            && ms >= FAILOVER_WITHIN_MS
        {
            failed.push(format!(
                "failover_ms={ms} (a replica was not ready on the new primary within {FAILOVER_WITHIN_MS} ms of the promotion)"
            ));
        }
        failed
    }
}
