-- Push: replicas register the tasks their subscribers listen to, and a change to a
-- registered task NOTIFYs `mcp_tasks_changed` with '<id> <version>'.
--
-- NOTIFY takes a cluster-wide lock when its transaction commits, which caps notifying
-- commits at a few thousand per second. Only transitions of watched tasks notify, so
-- transitions nobody listens to never pay for it.

-- Unlogged: registrations are refreshed every few seconds by the replicas that hold them,
-- so there is nothing to keep across a crash (the table comes back empty and is refilled).
CREATE UNLOGGED TABLE task_watches (
    tenant     text        NOT NULL,
    principal  text        NOT NULL,
    id         uuid        NOT NULL,
    replica    text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, principal, id, replica)
);

CREATE INDEX task_watches_expires_at ON task_watches (expires_at);

CREATE FUNCTION mcp_tasks_notify_watchers() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM task_watches w
        WHERE w.tenant = NEW.tenant AND w.principal = NEW.principal AND w.id = NEW.id
          AND w.expires_at > now()
    ) THEN
        PERFORM pg_notify('mcp_tasks_changed', NEW.id::text || ' ' || NEW.version::text);
    END IF;
    RETURN NULL;
END
$$;

-- Every change a client can see bumps `version`; heartbeats and lease bookkeeping do not,
-- so they never fire this.
CREATE TRIGGER tasks_notify_watchers
    AFTER UPDATE ON tasks
    FOR EACH ROW
    WHEN (OLD.version IS DISTINCT FROM NEW.version)
    EXECUTE FUNCTION mcp_tasks_notify_watchers();
