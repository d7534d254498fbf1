-- A task's history has a bound (issue 22). Deletion takes a task's events with it, but a
-- task without a TTL is never deleted, and one that asks for input again and again (or
-- is reclaimed, or released, again and again) would add events for ever. Each task keeps
-- its newest 500 (the console's HISTORY_LIMIT, so its timeline shows all that is kept):
-- once it has more, the oldest go, down to 400, so the trim runs once per hundred
-- events rather than on each.
--
-- Events of one task are written by statements that update its row, so they never race.
-- Additive: code of the previous release writes events as before and they are trimmed
-- alike.
CREATE OR REPLACE FUNCTION mcp_tasks_bound_events() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- An index probe of at most 501 entries of this task (a handful for most tasks).
    IF EXISTS (SELECT 1 FROM task_events WHERE id = NEW.id OFFSET 500) THEN
        DELETE FROM task_events
        WHERE ctid = ANY (ARRAY(
            SELECT ctid FROM task_events WHERE id = NEW.id ORDER BY at DESC OFFSET 400
        ));
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS task_events_bound ON task_events;
CREATE TRIGGER task_events_bound
    AFTER INSERT ON task_events
    FOR EACH ROW
    EXECUTE FUNCTION mcp_tasks_bound_events();
