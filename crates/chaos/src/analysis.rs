//! Reading the audit trail: which runs of a task were lost (a reclaim took their lease
//! over, or the task was finished by someone else after their lease lapsed), and
//! whether the chaos explains each loss: its worker was killed during the run, or the
//! run was under way when PostgreSQL went down. A loss that nothing explains means a
//! worker that was alive, with the database up, lost a lease it should have kept.

use std::collections::HashMap;

use time::OffsetDateTime;

use crate::audit::AuditEvent;

/// How many lost runs make a task fail with CRASH_RECOVERY (the tools' `max_attempts`).
pub(crate) const MAX_ATTEMPTS: usize = 3;

/// One run: from a claim until the next event of its task.
#[derive(Debug, Clone)]
struct Run {
    owner: String,
    claimed: OffsetDateTime,
    /// The claim took over a lapsed lease of the same worker: it reclaimed a task it
    /// was running itself.
    own_reclaim: bool,
}

/// A task's lost runs.
#[derive(Debug, Default)]
pub(crate) struct History {
    lost: Vec<(Run, OffsetDateTime, Option<String>)>,
}

/// Every task's history, by task id. `events` are in the order they were written, which
/// for one task is the order of its transitions (each locks the row).
pub(crate) fn histories(events: &[AuditEvent]) -> HashMap<String, History> {
    let mut by_task: HashMap<String, (History, Option<Run>)> = HashMap::new();
    for e in events {
        let (h, current) = by_task.entry(e.id.to_string()).or_default();
        let owner = e.lease_owner.clone().unwrap_or_else(|| "?".into());
        match e.event.as_str() {
            "claimed" => {
                if e.lapsed_owner.is_some()
                    && let Some(run) = current.take()
                {
                    h.lost.push((run, e.at, Some(owner.clone())));
                }
                *current = Some(Run {
                    own_reclaim: e.lapsed_owner.as_deref() == Some(owner.as_str()),
                    owner,
                    claimed: e.at,
                });
            }
            "finished" => {
                if e.lapsed_owner.is_some()
                    && let Some(run) = current.take()
                {
                    h.lost.push((run, e.at, None));
                }
            }
            _ => {}
        }
    }
    by_task.into_iter().map(|(id, (h, _))| (id, h)).collect()
}

/// What the chaos did that can cost a run its lease.
#[derive(Debug)]
pub(crate) struct Explainer<'a> {
    /// Worker id → just before its SIGKILL, and once it was reaped.
    pub(crate) killed: &'a HashMap<String, (OffsetDateTime, OffsetDateTime)>,
    /// PostgreSQL told to stop, and ready again.
    pub(crate) outage: Option<(OffsetDateTime, OffsetDateTime)>,
}

impl Explainer<'_> {
    fn cause(
        &self,
        owner: &str,
        from: OffsetDateTime,
        until: OffsetDateTime,
    ) -> Option<&'static str> {
        if let Some((before, after)) = self.killed.get(owner)
            && from <= *after
            && *before <= until
        {
            return Some("its worker was killed");
        }
        // Runs under way when the database went down may lapse during the outage. No
        // claim is made while it is down, so a claim after `down` was made once it was
        // back, and that run must keep its lease.
        if let Some((down, _back)) = self.outage
            && from <= down
            && down <= until
        {
            return Some("the database restarted");
        }
        None
    }
}

/// A run that ended without finishing its task.
#[derive(Debug, Clone)]
pub(crate) struct LostRun {
    run: Run,
    /// When the reclaim (or the finish) came.
    until: OffsetDateTime,
    /// Who reclaimed the task (none: it was finished after the lease lapsed).
    next_owner: Option<String>,
    /// What the chaos did to it, if anything.
    pub(crate) cause: Option<&'static str>,
}

impl LostRun {
    /// The run was started by a worker reclaiming its own lapsed lease.
    pub(crate) fn own_reclaim(&self) -> bool {
        self.run.own_reclaim
    }
}

impl std::fmt::Display for LostRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let run = &self.run;
        write!(
            f,
            "run by {} claimed at {}{} lost, then {} at {} ({})",
            run.owner,
            run.claimed.time(),
            if run.own_reclaim {
                " (reclaiming its own lapsed lease)"
            } else {
                ""
            },
            match &self.next_owner {
                Some(o) if *o == run.owner => "reclaimed by the same worker".to_owned(),
                Some(o) => format!("reclaimed by {o}"),
                None => "the task was finished after the lease lapsed".to_owned(),
            },
            self.until.time(),
            self.cause
                .unwrap_or("its worker was not killed and the database was up")
        )
    }
}

impl History {
    /// The lost runs, each with what the chaos did to it, if anything.
    pub(crate) fn lost_runs(&self, explainer: &Explainer<'_>) -> Vec<LostRun> {
        self.lost
            .iter()
            .map(|(run, until, next_owner)| LostRun {
                cause: explainer.cause(&run.owner, run.claimed, *until),
                run: run.clone(),
                until: *until,
                next_owner: next_owner.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use mcp_tasks_store::TaskId;

    use super::*;

    fn at(s: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(s)
    }

    fn claim(id: TaskId, s: i64, owner: &str, lapsed: Option<&str>) -> AuditEvent {
        AuditEvent {
            id,
            event: "claimed".into(),
            status: None,
            lease_token: Some(s),
            lease_owner: Some(owner.into()),
            lapsed_owner: lapsed.map(Into::into),
            at: at(s),
        }
    }

    fn finished(id: TaskId, s: i64, lapsed: Option<&str>) -> AuditEvent {
        AuditEvent {
            id,
            event: "finished".into(),
            status: Some("failed".into()),
            lease_token: None,
            lease_owner: None,
            lapsed_owner: lapsed.map(Into::into),
            at: at(s),
        }
    }

    #[test]
    fn losses_are_explained_by_kills_and_the_outage_only() {
        let id = TaskId::random();
        let events = [
            // Lost to the outage (under way when the database went down at 15).
            claim(id, 10, "w0-1", None),
            // A self-reclaim after the outage, lost with its worker alive: unexplained.
            claim(id, 20, "w0-1", Some("w0-1")),
            // Lost because w0-1 was killed at 25.
            claim(id, 23, "w0-1", Some("w0-1")),
            claim(id, 30, "w1-1", Some("w0-1")),
            finished(id, 33, Some("w1-1")),
        ];
        let killed = HashMap::from([("w0-1".to_owned(), (at(25), at(25)))]);
        let explainer = Explainer {
            killed: &killed,
            outage: Some((at(15), at(18))),
        };
        let runs = histories(&events)[&id.to_string()].lost_runs(&explainer);
        let causes: Vec<_> = runs.iter().map(|r| r.cause).collect();
        assert_eq!(
            causes,
            [
                Some("the database restarted"),
                None,
                Some("its worker was killed"),
                None,
            ]
        );
        assert!(runs[1].own_reclaim() && !runs[0].own_reclaim());
    }

    #[test]
    fn runs_that_end_normally_are_not_lost() {
        let id = TaskId::random();
        // Asked for input (lease given back), answered, re-run, completed.
        let events = [
            claim(id, 1, "w0-1", None),
            claim(id, 5, "w0-1", None),
            finished(id, 6, None),
        ];
        let killed = HashMap::new();
        let explainer = Explainer {
            killed: &killed,
            outage: None,
        };
        assert!(
            histories(&events)[&id.to_string()]
                .lost_runs(&explainer)
                .is_empty()
        );
    }
}
