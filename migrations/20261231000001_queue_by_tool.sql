-- Claims that do not grow with the backlog or the fleet (issue 26, item 6).

-- A worker's claim reads the queue of each of its tools (see `claim.rs`), in claim order,
-- and never walks past another tool's backlog. Only queued rows are in it.
CREATE INDEX IF NOT EXISTS tasks_queue_by_tool ON tasks (tool, queue_key)
    WHERE status = 'working' AND lease_owner IS NULL;

-- Set when the maintenance leader turned a lapsed lease back into a queued row, cleared
-- by the claim that takes it: that claim is a reclaim (a run again after a lost worker).
-- A constant default: added without rewriting the table.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS lease_lapsed boolean NOT NULL DEFAULT false;

-- Which worker leads maintenance (lease rescue, requeueing lapsed leases, expiry,
-- deletion) and until when: one row, taken over by another worker once `until` has
-- passed, so a leader that dies is replaced within its term. A row rather than a session
-- advisory lock, so that it works through a pooler in transaction mode.
CREATE TABLE IF NOT EXISTS maintenance_leader (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    worker    text NOT NULL,
    until     timestamptz NOT NULL
);

-- As in 20261221000002_claimed_attempt.sql, plus the requeue of a lapsed lease, which
-- is recorded as its lapse (the claim that follows finds no lease on the row).
CREATE OR REPLACE FUNCTION mcp_tasks_record_events() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    run_attempt integer := coalesce(OLD.claimed_attempt, OLD.attempt);
BEGIN
    IF NEW.lease_token <> OLD.lease_token THEN
        -- A new claim replaces the row's record of the one before: archive that one.
        IF OLD.claimed_at IS NOT NULL THEN
            INSERT INTO task_events (tenant, id, at, kind, worker, attempt, ms)
            VALUES (NEW.tenant, NEW.id, OLD.claimed_at, 'claimed', OLD.claimed_by,
                    run_attempt, OLD.pickup_ms);
        END IF;
        -- A lease still on the row lapsed: its worker was lost.
        IF OLD.lease_owner IS NOT NULL THEN
            INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
            VALUES (NEW.tenant, NEW.id, OLD.lease_expires_at, 'lease_lapsed',
                    OLD.lease_owner, run_attempt, 'reclaimed');
        END IF;
    ELSIF NEW.finished_at IS NOT NULL THEN
        -- Rescue of a lapsed lease: failed (crash recovery) or cancelled, nobody to run it.
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
        VALUES (NEW.tenant, NEW.id, OLD.lease_expires_at, 'lease_lapsed',
                OLD.lease_owner, run_attempt, NEW.status);
    ELSIF NEW.lease_lapsed AND NOT OLD.lease_lapsed THEN
        -- The leader requeued a lapsed lease: its worker was lost, the task runs again.
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
        VALUES (NEW.tenant, NEW.id, OLD.lease_expires_at, 'lease_lapsed',
                OLD.lease_owner, run_attempt, 'requeued');
    ELSIF NEW.status = 'input_required' AND OLD.status <> 'input_required' THEN
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
        VALUES (NEW.tenant, NEW.id, now(), 'input_requested', OLD.lease_owner, run_attempt,
                (SELECT string_agg(k, ' ' ORDER BY k)
                 FROM jsonb_object_keys(NEW.input_requests) k));
    ELSIF NEW.input_responses IS DISTINCT FROM OLD.input_responses THEN
        INSERT INTO task_events (tenant, id, at, kind, attempt, detail)
        VALUES (NEW.tenant, NEW.id, now(),
                CASE WHEN NEW.status = 'working' THEN 'resumed' ELSE 'input_answered' END,
                run_attempt,
                (SELECT string_agg(k, ' ' ORDER BY k)
                 FROM jsonb_object_keys(NEW.input_responses) k
                 WHERE NOT OLD.input_responses ? k));
    ELSIF OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NULL THEN
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt)
        VALUES (NEW.tenant, NEW.id, now(), 'released', OLD.lease_owner, run_attempt);
    END IF;
    RETURN NULL;
END
$$;
