-- Fair claiming (issue 26): a task's place in the queue is a number set when it is
-- created (`queue_key`), and workers claim in that order. See ARCHITECTURE.md,
-- *Scheduling*: each (tenant, principal) lane advances its own key by
-- (the tenant's principals with queued work) / (the tenant's weight) per task, starting
-- no earlier than the queue's clock, so lanes interleave round-robin, weighted per tenant.

-- Added without a default first: a volatile default on ADD COLUMN rewrites the table.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS queue_key float8;

-- The clock: the highest key any worker has claimed, one row per worker so that claims
-- never wait on each other to move it (a create reads the max of a handful of rows).
CREATE TABLE IF NOT EXISTS queue_clock (
    worker  text PRIMARY KEY,
    key     float8 NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);

-- Each lane's last key. A lane whose last key is behind the clock has nothing queued
-- ahead of it and is the same as no row (its next task starts at the clock), so
-- maintenance may delete it.
CREATE TABLE IF NOT EXISTS queue_lanes (
    tenant     text NOT NULL,
    principal  text NOT NULL,
    last_key   float8 NOT NULL,
    PRIMARY KEY (tenant, principal)
);
-- The tenant's lanes with work past the clock (they share its weight).
CREATE INDEX IF NOT EXISTS queue_lanes_tenant_key ON queue_lanes (tenant, last_key);
-- Lanes left behind the clock, for maintenance.
CREATE INDEX IF NOT EXISTS queue_lanes_key ON queue_lanes (last_key);

-- Tasks inserted without a key (by replicas of the previous release during a deploy)
-- start at the clock, as a new lane would; they are never starved behind keyed ones.
CREATE OR REPLACE FUNCTION mcp_tasks_queue_clock() RETURNS float8
LANGUAGE sql STABLE
AS $$ SELECT coalesce(max(key), 0) FROM queue_clock $$;
ALTER TABLE tasks ALTER COLUMN queue_key SET DEFAULT mcp_tasks_queue_clock();

-- Unfinished tasks keep their order and go ahead of everything new: seconds before now
-- (negative), the clock starting at 0.
UPDATE tasks SET queue_key = EXTRACT(EPOCH FROM created_at - now())
WHERE finished_at IS NULL AND queue_key IS NULL;

-- The queue in claim order.
CREATE INDEX IF NOT EXISTS tasks_queue_order ON tasks (queue_key)
    WHERE status = 'working' AND lease_owner IS NULL;

-- Rate limits (`max_per_second`, `burst`): one token bucket per limited tool or upstream
-- (kind 'tool' or 'group'), spent by the claims that start its tasks. Claims with limits
-- run one at a time (a transaction-scoped advisory lock), so a bucket is never
-- overspent.
CREATE TABLE IF NOT EXISTS rate_buckets (
    kind    text NOT NULL,
    name    text NOT NULL,
    tokens  float8 NOT NULL,
    at      timestamptz NOT NULL,
    PRIMARY KEY (kind, name)
);
