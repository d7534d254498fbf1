-- The attempt the task is on, kept through input rounds (issue 15).
--
-- `attempt` counts the runs of the current round against `max_attempts`: parking for
-- input (request_input) and the answer that requeues the task set it to 0, so that each
-- round has its whole budget, and a release takes the interrupted run back. It therefore
-- does not say which attempt a claim was: a task waiting for input read "attempt 0", and
-- the history archived and answered those claims without their number.
--
-- `claimed_attempt` is the current (latest) claim's attempt number, set by the claim
-- statement beside claimed_at and claimed_by on the row it rewrites anyway, and changed
-- by nothing else; no index covers it, so it costs no HOT update. NULL on rows claimed
-- before it existed (readers fall back to `attempt`).
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS claimed_attempt integer;

-- As in 20261220000001_task_events.sql, with every event naming the attempt of the claim
-- it belongs to (the trigger and its WHEN clause are unchanged).
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
