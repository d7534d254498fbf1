-- Push: replicas mark the tasks their subscribers listen to, and a change to a marked task
-- NOTIFYs `mcp_tasks_changed` with '<id> <version>'.
--
-- NOTIFY takes a cluster-wide lock when its transaction commits, which caps notifying
-- commits at a few thousand per second. Only transitions of watched tasks notify. The
-- mark is a column so that the trigger's WHEN clause decides without calling any
-- function: a transition nobody watches pays nothing (see `mcp-tasks bench notify-cost`).

-- Until when some replica watches this task. Replicas refresh it while they do; a replica
-- that goes away simply lets it lapse. Not indexed, so refreshing it is a HOT update.
ALTER TABLE tasks ADD COLUMN watched_until timestamptz;

CREATE FUNCTION mcp_tasks_notify_watchers() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('mcp_tasks_changed', NEW.id::text || ' ' || NEW.version::text);
    RETURN NULL;
END
$$;

-- Every change a client can see bumps `version`; heartbeats, lease bookkeeping and watch
-- refreshes do not, so they never notify.
CREATE TRIGGER tasks_notify_watchers
    AFTER UPDATE ON tasks
    FOR EACH ROW
    WHEN (NEW.version <> OLD.version AND NEW.watched_until > now())
    EXECUTE FUNCTION mcp_tasks_notify_watchers();
