//! What the web console reads: the tasks list and its counts, the inbox, the health
//! page's figures, and each task's history. Every statement is bounded (a limit on the
//! rows it may visit) and walks an index; [`ConsoleReads::console_plans`] shows the plans,
//! so tests and `mcp-tasks bench console` can check that no page scans `tasks`.
//!
//! The statements are run as they are written here (`sqlx::query_as` on their text), not
//! checked by `query_as!`: each page's plans are read with `EXPLAIN` from the same text,
//! and a list's or count's statement is chosen by its scope and filter.

mod health;
mod history;
mod list;
mod plans;

use mcp_tasks_wire::TaskStatus;
use mcp_tasks_wire::service_messages::EndReason;
use time::OffsetDateTime;
use uuid::Uuid;

#[cfg(doc)]
use crate::ConsoleReads;
use crate::record::end_reason;
use crate::{Owner, StoreError, TaskId};

pub use health::{
    Health, LapseCounts, PercentileBucket, QUEUE_COUNT_LIMIT, RUNNING_LIMIT, RunningTask,
    SAMPLES_PER_BUCKET, WorkerLoad,
};
pub use history::{HISTORY_LIMIT, HistoryEvent, HistoryKind};
pub use list::{COUNT_LIMIT, SCAN_LIMIT, StatusCount, TaskFilter, TaskPage};
pub use plans::QueryPlan;

/// Whose tasks a console page shows: one principal's, or (an admin's view) every task of
/// the tenant. Never more than one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub tenant: String,
    /// `None`: the whole tenant.
    pub principal: Option<String>,
}

impl Scope {
    pub fn owner(owner: &Owner) -> Self {
        Self {
            tenant: owner.tenant.clone(),
            principal: Some(owner.principal.clone()),
        }
    }

    pub fn tenant(tenant: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            principal: None,
        }
    }
}

/// One task as a list shows it: no arguments, answers or result.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSummary {
    pub owner: Owner,
    pub id: TaskId,
    pub tool: String,
    pub status: TaskStatus,
    /// Stored, or composed from the end reason, as `tasks/get` shows it.
    pub status_message: Option<String>,
    pub end_reason: Option<EndReason>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    /// The attempt the task is on (`TaskRecord::current_attempt`): an input round keeps
    /// the attempt of the claim that asked.
    pub attempt: i32,
    pub max_attempts: i32,
}

/// (`summary_columns!` in `sql.rs`.)
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct SummaryRow {
    tenant: String,
    principal: String,
    id: Uuid,
    tool: String,
    status: String,
    status_message: Option<String>,
    end_reason: Option<String>,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    attempt: i32,
    max_attempts: i32,
}

impl TryFrom<SummaryRow> for TaskSummary {
    type Error = StoreError;

    fn try_from(row: SummaryRow) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::corrupt(format!("task {}: {what}", row.id));
        let status: TaskStatus = row.status.parse().map_err(|e: String| corrupt(&e))?;
        let end_reason = row
            .end_reason
            .as_deref()
            .map(|code| end_reason(code).ok_or_else(|| corrupt("unknown end_reason")))
            .transpose()?;
        Ok(Self {
            owner: Owner::new(row.tenant, row.principal),
            id: TaskId(row.id),
            tool: row.tool,
            status,
            status_message: row
                .status_message
                .or_else(|| end_reason.map(|r| r.status_message().to_owned())),
            end_reason,
            created_at: row.created_at,
            updated_at: row.updated_at,
            attempt: row.attempt,
            max_attempts: row.max_attempts,
        })
    }
}
