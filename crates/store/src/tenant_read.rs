//! Reads across a tenant's principals, for the web console's tenant admins: the task is
//! still keyed by its tenant, so another tenant's task is never read.

use crate::record::TaskRow;
use crate::sql::task_columns;
use crate::{ConsoleReads, DbResult, Result, TaskId, TaskRecord};

/// Built with `concat!` and run as it is, not checked by `query_as!`: its plan is also
/// read with `EXPLAIN` (`console/plans.rs`), which needs the text.
///
/// The key is (tenant, principal, id): probe it once per principal of the tenant, found
/// by skipping through the key's index (a loose index scan), instead of walking every key
/// of the tenant.
pub(crate) const GET_IN_TENANT: &str = concat!(
    "WITH RECURSIVE owners(principal) AS (
         (SELECT principal FROM tasks WHERE tenant = $1 ORDER BY principal LIMIT 1)
         UNION ALL
         SELECT (SELECT t.principal FROM tasks t
                 WHERE t.tenant = $1 AND t.principal > o.principal
                 ORDER BY t.principal LIMIT 1)
         FROM owners o WHERE o.principal IS NOT NULL
     )
     SELECT ",
    task_columns!(),
    " FROM tasks WHERE tenant = $1 AND id = $2
       AND principal = ANY (ARRAY(SELECT principal FROM owners WHERE principal IS NOT NULL))"
);

impl ConsoleReads {
    /// Task `id` of `tenant`, whichever principal owns it.
    #[tracing::instrument(name = "db.task.get_in_tenant", skip_all, err(level = "debug"))]
    pub async fn get_task_in_tenant(&self, tenant: &str, id: TaskId) -> Result<Option<TaskRecord>> {
        let row: Option<TaskRow> = sqlx::query_as(GET_IN_TENANT)
            .bind(tenant)
            .bind(id.0)
            .fetch_optional(self.db.pool())
            .await
            .db()?;
        row.map(TaskRecord::try_from).transpose()
    }
}
