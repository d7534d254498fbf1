-- The durable task table. One row per task, keyed by its owner first so that a lookup
-- with the wrong owner never touches another owner's row (no index-hit timing oracle).
CREATE TABLE tasks (
    tenant              text        NOT NULL,
    principal           text        NOT NULL,
    id                  uuid        NOT NULL,

    -- The creating request.
    tool                text        NOT NULL,
    arguments           jsonb       NOT NULL,
    trace_context       jsonb,

    -- What tasks/get shows.
    status              text        NOT NULL DEFAULT 'working',
    status_message      text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    ttl_ms              bigint,
    poll_interval_ms    bigint,
    -- How long a finished task stays readable, at least; ttl_ms is raised to honour it.
    retention_ms        bigint      NOT NULL,
    -- created_at + ttl_ms, kept in step by every statement that changes ttl_ms.
    expires_at          timestamptz,
    result              jsonb,
    error               jsonb,

    -- Input during a task (end-and-re-enter).
    input_requests      jsonb,                       -- outstanding requests, by key
    input_responses     jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- every answer received, by key
    issued_keys         text[]      NOT NULL DEFAULT '{}',         -- every key ever issued
    checkpoint          jsonb,

    -- Execution. run_after is when the task may next be claimed: now-ish when runnable,
    -- the lease expiry while leased, NULL when not runnable at all.
    run_after           timestamptz,
    lease_owner         text,
    lease_token         bigint      NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    attempt             integer     NOT NULL DEFAULT 0,
    max_attempts        integer     NOT NULL,
    cancel_requested_at timestamptz,

    -- Bumped on every change a client can see; snapshots are compared by it.
    version             bigint      NOT NULL DEFAULT 1,

    PRIMARY KEY (tenant, principal, id),

    CONSTRAINT tasks_status_known
        CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    CONSTRAINT tasks_result_iff_completed CHECK ((status = 'completed') = (result IS NOT NULL)),
    CONSTRAINT tasks_error_iff_failed CHECK ((status = 'failed') = (error IS NOT NULL)),
    CONSTRAINT tasks_requests_iff_input_required
        CHECK ((status = 'input_required') = (input_requests IS NOT NULL)),
    CONSTRAINT tasks_finished_iff_terminal
        CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT tasks_runnable_only_when_working CHECK (status = 'working' OR run_after IS NULL),
    CONSTRAINT tasks_leased_only_when_working CHECK (status = 'working' OR lease_owner IS NULL),
    CONSTRAINT tasks_lease_complete
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT tasks_ttl_positive CHECK (ttl_ms IS NULL OR ttl_ms > 0),
    CONSTRAINT tasks_poll_positive CHECK (poll_interval_ms IS NULL OR poll_interval_ms > 0),
    CONSTRAINT tasks_attempts_positive CHECK (max_attempts > 0)
);

-- The claimable set: only working tasks, ordered by when they may run. Terminal and
-- input_required tasks are not in it, so it stays as small as the live queue.
CREATE INDEX tasks_claimable ON tasks (run_after) WHERE status = 'working';

-- Expiry of live tasks and deletion of finished ones, both by expires_at.
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;

-- The table is written hot and rows die young: vacuum by row count, not by table size.
ALTER TABLE tasks SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- A deleted task's owner can still be told "expired" rather than "not found" for a while.
CREATE TABLE task_tombstones (
    tenant     text        NOT NULL,
    principal  text        NOT NULL,
    id         uuid        NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, principal, id)
);

CREATE INDEX task_tombstones_deleted_at ON task_tombstones (deleted_at);

-- The ttl_ms a task gets when it finishes now: never lower than before, and long enough
-- that it stays readable for its retention period.
CREATE FUNCTION mcp_tasks_retained_ttl(created timestamptz, ttl bigint, retention bigint)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN ttl IS NULL THEN NULL
        ELSE GREATEST(ttl, ceil(EXTRACT(EPOCH FROM (now() - created)) * 1000)::bigint + retention)
    END
$$;
