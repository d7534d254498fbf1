//! Reads across a tenant's principals, for the web console's tenant admins: the task is
//! still keyed by its tenant, so another tenant's task is never read.

use crate::record::{TaskRow, task_columns};
use crate::{DbResult, Result, Store, TaskId, TaskRecord};

impl Store {
    /// Task `id` of `tenant`, whichever principal owns it.
    #[tracing::instrument(name = "db.task.get_in_tenant", skip_all, err(level = "debug"))]
    pub async fn get_task_in_tenant(&self, tenant: &str, id: TaskId) -> Result<Option<TaskRecord>> {
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE tenant = $1 AND id = $2"
        ))
        .bind(tenant)
        .bind(id.0)
        .fetch_optional(self.pool())
        .await
        .db()?;
        row.map(TaskRecord::try_from).transpose()
    }
}
