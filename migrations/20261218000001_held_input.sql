-- Input while the worker holds the task (issue 9): an upstream MCP server asks for input
-- (elicitation, sampling) during a call, and the worker keeps that call open, and so its
-- lease, while the task shows input_required. The lease is heartbeated as usual; the
-- answer (tasks/update, on any replica) sets the task working again without making it
-- runnable, and the worker that holds it sends the answer upstream. A lapsed lease of
-- such a task is reclaimed or rescued like any other (the call it held is gone).
--
-- The tools that end their run to ask (end-and-re-enter) still release the lease when
-- they ask, so for them nothing changes. Older workers never write this state, and the
-- relaxed check admits every row the old one did.
ALTER TABLE tasks
    DROP CONSTRAINT IF EXISTS tasks_leased_only_when_working,
    ADD CONSTRAINT tasks_leased_only_when_live
        CHECK (status IN ('working', 'input_required') OR lease_owner IS NULL);

-- What the client that created the task declared it can answer (its elicitation,
-- sampling and roots capabilities, nothing else), so that a worker asks it only for
-- input of a kind it declared. NULL for tasks created before this column (and by older
-- replicas): their workers bridge form elicitation only.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS client_capabilities jsonb;
