//! Paging through an owner's tasks (the 2025-11-25 `tasks/list`).

use time::OffsetDateTime;

use crate::record::TaskRow;
use crate::sql::checked;
use crate::{DbResult, Owner, ReplicaStore, Result, TaskId, TaskRecord};

/// Where a page of [`ReplicaStore::list_tasks`] starts: just after this task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListCursor {
    pub created_at: OffsetDateTime,
    pub id: TaskId,
}

impl ReplicaStore {
    /// Up to `limit` of the owner's tasks in creation order, after `after`. Tasks created
    /// while a client pages come at the end, so no page skips one.
    #[tracing::instrument(name = "db.task.list", skip_all, err(level = "debug"))]
    pub async fn list_tasks(
        &self,
        owner: &Owner,
        after: Option<ListCursor>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>> {
        let rows = checked!(query_as!(
            TaskRow,
            "SELECT "
                + TASK_COLUMNS
                + " FROM tasks
             WHERE tenant = $1 AND principal = $2
               AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4))
             ORDER BY created_at, id
             LIMIT $5",
            &owner.tenant,
            &owner.principal,
            after.map(|c| c.created_at),
            after.map(|c| c.id.0),
            limit
        ))
        .fetch_all(self.db.pool())
        .await
        .db()?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
