//! A task's history, for its timeline: what the row records (creation, the current
//! run's claim, a cancel request, the end) merged with what `task_events` keeps of the
//! rest (earlier claims, lapsed leases, input rounds, releases), in time order. See the
//! migration `20261220000001_task_events.sql` for why it is split so.

use mcp_tasks_wire::TaskStatus;
use mcp_tasks_wire::service_messages::EndReason;
use time::OffsetDateTime;

use crate::record::end_reason;
use crate::{ConsoleReads, DbResult, Lookup, Owner, Result, StoreError, TaskId};

/// Most events of one task read (a task asking for input again and again has many).
pub const HISTORY_LIMIT: i64 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryKind {
    Created,
    /// A worker claimed the task and started an attempt.
    Claimed,
    /// The worker holding it was lost; `detail` says what followed.
    LeaseLapsed,
    /// The handler asked for input (`detail`: the keys).
    InputRequested,
    /// Some answers arrived, others are still outstanding (`detail`: the keys).
    InputAnswered,
    /// The last answers arrived; the task is runnable again.
    Resumed,
    /// Its worker shut down and gave it back unfinished.
    Released,
    CancelRequested,
    /// Finished: `status` says how, `end_reason` why when the service ended it.
    Finished,
}

impl HistoryKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Claimed => "claimed",
            Self::LeaseLapsed => "lease_lapsed",
            Self::InputRequested => "input_requested",
            Self::InputAnswered => "input_answered",
            Self::Resumed => "resumed",
            Self::Released => "released",
            Self::CancelRequested => "cancel_requested",
            Self::Finished => "finished",
        }
    }

    fn parse(code: &str) -> Option<Self> {
        Some(match code {
            "claimed" => Self::Claimed,
            "lease_lapsed" => Self::LeaseLapsed,
            "input_requested" => Self::InputRequested,
            "input_answered" => Self::InputAnswered,
            "resumed" => Self::Resumed,
            "released" => Self::Released,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEvent {
    pub at: OffsetDateTime,
    pub kind: HistoryKind,
    pub worker: Option<String>,
    /// The attempt of the claim the event belongs to, when known (each input round starts
    /// the count anew).
    pub attempt: Option<i32>,
    /// Claimed: how long the task waited to be claimed.
    pub pickup_ms: Option<i64>,
    /// Finished: how.
    pub status: Option<TaskStatus>,
    pub end_reason: Option<EndReason>,
    /// Input rounds: the keys; a lapsed lease: what followed.
    pub detail: Option<String>,
}

impl HistoryEvent {
    fn new(at: OffsetDateTime, kind: HistoryKind) -> Self {
        Self {
            at,
            kind,
            worker: None,
            attempt: None,
            pickup_ms: None,
            status: None,
            end_reason: None,
            detail: None,
        }
    }
}

pub(super) const FACTS: &str = "
    SELECT created_at, claimed_at, claimed_by, pickup_ms,
           coalesce(claimed_attempt, attempt), cancel_requested_at,
           finished_at, status, end_reason
    FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3";

pub(super) const EVENTS: &str = "
    SELECT at, kind, worker, attempt, ms, detail FROM task_events
    WHERE id = $2 AND tenant = $1 ORDER BY at LIMIT $3";

type RowFacts = (
    OffsetDateTime,
    Option<OffsetDateTime>,
    Option<String>,
    Option<i32>,
    i32,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    String,
    Option<String>,
);

type EventRow = (
    OffsetDateTime,
    String,
    Option<String>,
    i32,
    Option<i32>,
    Option<String>,
);

impl ConsoleReads {
    /// The task's history, oldest first; an unknown id and another owner's task alike
    /// are not found.
    #[tracing::instrument(name = "db.console.history", skip_all, err(level = "debug"))]
    pub async fn task_history(
        &self,
        owner: &Owner,
        id: TaskId,
    ) -> Result<Lookup<Vec<HistoryEvent>>> {
        let facts: Option<RowFacts> = sqlx::query_as(FACTS)
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(id.0)
            .fetch_optional(self.db.pool())
            .await
            .db()?;
        let Some((
            created,
            claimed_at,
            claimed_by,
            pickup,
            attempt,
            cancel,
            finished,
            status,
            reason,
        )) = facts
        else {
            return crate::client_ops::missing(self.db.pool(), owner, id).await;
        };
        let rows: Vec<EventRow> = sqlx::query_as(EVENTS)
            .bind(&owner.tenant)
            .bind(id.0)
            .bind(HISTORY_LIMIT)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let corrupt = |what: &str| StoreError::corrupt(format!("task {id}: {what}"));
        let mut events = vec![HistoryEvent::new(created, HistoryKind::Created)];
        for (at, kind, worker, attempt, ms, detail) in rows {
            let kind = HistoryKind::parse(&kind).ok_or_else(|| corrupt("unknown event kind"))?;
            events.push(HistoryEvent {
                worker,
                attempt: (attempt > 0).then_some(attempt),
                pickup_ms: ms.map(i64::from),
                detail,
                ..HistoryEvent::new(at, kind)
            });
        }
        if let Some(at) = claimed_at {
            events.push(HistoryEvent {
                worker: claimed_by.clone(),
                attempt: (attempt > 0).then_some(attempt),
                pickup_ms: pickup.map(i64::from),
                ..HistoryEvent::new(at, HistoryKind::Claimed)
            });
        }
        if let Some(at) = cancel {
            events.push(HistoryEvent::new(at, HistoryKind::CancelRequested));
        }
        if let Some(at) = finished {
            let status: TaskStatus = status.parse().map_err(|e: String| corrupt(&e))?;
            let end_reason = reason
                .as_deref()
                .map(|code| end_reason(code).ok_or_else(|| corrupt("unknown end_reason")))
                .transpose()?;
            events.push(HistoryEvent {
                // A run's own outcome names its worker; an end the service made does not.
                worker: if end_reason.is_none() {
                    claimed_by
                } else {
                    None
                },
                attempt: (attempt > 0).then_some(attempt),
                status: Some(status),
                end_reason,
                ..HistoryEvent::new(at, HistoryKind::Finished)
            });
        }
        // Stable: what happened in one statement keeps the order it is listed in here.
        events.sort_by_key(|e| e.at);
        Ok(Lookup::Found(events))
    }
}
