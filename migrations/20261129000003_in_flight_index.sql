-- Tasks in flight per owner, for the per-principal limit on live tasks. Only live tasks
-- are in it, so it stays as small as the live set.
CREATE INDEX tasks_in_flight ON tasks (tenant, principal) WHERE finished_at IS NULL;
