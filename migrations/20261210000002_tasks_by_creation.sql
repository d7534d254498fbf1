-- no-transaction
-- tasks/list of 2025-11-25 clients pages through an owner's tasks in creation order.
-- None of these columns ever changes, so updates stay HOT; built without blocking writes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_owner_created
    ON tasks (tenant, principal, created_at, id);
