-- The web console (issue 15): each task's history (its timeline), and what the tasks
-- list, inbox and health pages read.
--
-- History costs the hot path (create -> claim -> finish) almost nothing (issue 12's
-- budget is 3 KB of WAL per task, and an extra row per transition would take a sixth of
-- it): the row keeps what that path needs, and a side table only what the row forgets.
--
-- * On the row: creation (created_at), the current run's claim (claimed_at, claimed_by,
--   pickup_ms, attempt: set by the claim statement itself, on a row it rewrites anyway),
--   a cancel request (cancel_requested_at), the end (finished_at, status, end_reason).
-- * In task_events, append-only, written by a trigger in the statement that makes the
--   transition (no extra statement or commit): every earlier claim (archived when the
--   next one replaces it), lapsed leases, input requested and answered, releases. A task
--   that runs once writes none of them.
--
-- Deletion of a task deletes its events (maintenance), so history is bounded with tasks.
ALTER TABLE tasks
    ADD COLUMN IF NOT EXISTS claimed_at timestamptz,
    ADD COLUMN IF NOT EXISTS claimed_by text,
    -- How long the current run waited to be claimed (ms): the health page's pickup delay.
    ADD COLUMN IF NOT EXISTS pickup_ms integer;

CREATE TABLE IF NOT EXISTS task_events (
    tenant  text        NOT NULL,
    -- Task ids are unique (random v4, made by the service); the owner is checked on the
    -- task row before its events are read, so events do not repeat the principal.
    id      uuid        NOT NULL,
    at      timestamptz NOT NULL,
    -- claimed | lease_lapsed | input_requested | input_answered | resumed | released
    kind    text        NOT NULL,
    worker  text,
    attempt integer     NOT NULL,
    -- claimed: its pickup delay.
    ms      integer,
    -- lease_lapsed: what followed (reclaimed, failed, cancelled); input: the keys.
    detail  text
);

CREATE INDEX IF NOT EXISTS task_events_task ON task_events (id);
-- The health page's lapses over time: only lapse events are in it, so only a lapse (rare
-- by nature) pays for it.
CREATE INDEX IF NOT EXISTS task_events_lapses ON task_events (tenant, at)
    WHERE kind = 'lease_lapsed';

CREATE OR REPLACE FUNCTION mcp_tasks_record_events() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.lease_token <> OLD.lease_token THEN
        -- A new claim replaces the row's record of the one before: archive that one.
        IF OLD.claimed_at IS NOT NULL THEN
            INSERT INTO task_events (tenant, id, at, kind, worker, attempt, ms)
            VALUES (NEW.tenant, NEW.id, OLD.claimed_at, 'claimed', OLD.claimed_by,
                    OLD.attempt, OLD.pickup_ms);
        END IF;
        -- A lease still on the row lapsed: its worker was lost.
        IF OLD.lease_owner IS NOT NULL THEN
            INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
            VALUES (NEW.tenant, NEW.id, OLD.lease_expires_at, 'lease_lapsed',
                    OLD.lease_owner, OLD.attempt, 'reclaimed');
        END IF;
    ELSIF NEW.finished_at IS NOT NULL THEN
        -- Rescue of a lapsed lease: failed (crash recovery) or cancelled, nobody to run it.
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
        VALUES (NEW.tenant, NEW.id, OLD.lease_expires_at, 'lease_lapsed',
                OLD.lease_owner, OLD.attempt, NEW.status);
    ELSIF NEW.status = 'input_required' AND OLD.status <> 'input_required' THEN
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
        VALUES (NEW.tenant, NEW.id, now(), 'input_requested', OLD.lease_owner, OLD.attempt,
                (SELECT string_agg(k, ' ' ORDER BY k)
                 FROM jsonb_object_keys(NEW.input_requests) k));
    ELSIF NEW.input_responses IS DISTINCT FROM OLD.input_responses THEN
        INSERT INTO task_events (tenant, id, at, kind, attempt, detail)
        VALUES (NEW.tenant, NEW.id, now(),
                CASE WHEN NEW.status = 'working' THEN 'resumed' ELSE 'input_answered' END,
                OLD.attempt,
                (SELECT string_agg(k, ' ' ORDER BY k)
                 FROM jsonb_object_keys(NEW.input_responses) k
                 WHERE NOT OLD.input_responses ? k));
    ELSIF OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NULL THEN
        INSERT INTO task_events (tenant, id, at, kind, worker, attempt)
        VALUES (NEW.tenant, NEW.id, now(), 'released', OLD.lease_owner, OLD.attempt);
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clause keeps the function out of every update the row records by itself: the
-- first claim, a worker's finish, expiry, cancellation, heartbeats, watch marks, status
-- messages and checkpoints. (A task whose input was never asked for has
-- input_responses unchanged by every statement but tasks/update.)
DROP TRIGGER IF EXISTS tasks_record_events ON tasks;
CREATE TRIGGER tasks_record_events
    AFTER UPDATE ON tasks
    FOR EACH ROW
    WHEN ((NEW.lease_token <> OLD.lease_token
           AND (OLD.claimed_at IS NOT NULL OR OLD.lease_owner IS NOT NULL))
          OR (NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL
              AND OLD.lease_owner IS NOT NULL AND OLD.lease_expires_at <= now()
              AND NEW.end_reason IN ('crash_recovery', 'cancelled_by_client'))
          OR (NEW.status = 'input_required' AND OLD.status <> 'input_required')
          OR (OLD.status = 'input_required'
              AND NEW.input_responses IS DISTINCT FROM OLD.input_responses)
          OR (NEW.finished_at IS NULL AND OLD.lease_owner IS NOT NULL
              AND NEW.lease_owner IS NULL AND NEW.status = 'working'))
    EXECUTE FUNCTION mcp_tasks_record_events();

-- An admin's view of the whole tenant, newest first (an owner's own tasks page through
-- tasks_owner_created). Its columns never change, so updates that were HOT stay HOT.
CREATE INDEX IF NOT EXISTS tasks_tenant_created ON tasks (tenant, created_at, id);
