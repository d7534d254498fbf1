-- tasks/list of 2025-11-25 clients pages through an owner's tasks in creation order.
-- None of these columns ever changes, so updates stay HOT.
-- Not CONCURRENTLY: that waits for every open transaction, among them other migrators
-- waiting for the migration lock this run holds, which deadlocks.
CREATE INDEX IF NOT EXISTS tasks_owner_created ON tasks (tenant, principal, created_at, id);
