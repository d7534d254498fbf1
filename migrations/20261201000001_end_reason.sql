-- Why the service ended a task on its own account (not a tool's outcome): the client
-- cancelled it with no run left to record that, it expired, or its workers were lost on
-- every attempt. The store records the reason; the status message and JSON-RPC error
-- clients see are composed from it (and `attempt`) when the task is read, so no protocol
-- text is written by SQL. Tasks ended before this column existed carry their texts in
-- status_message and error, and read as they always did.
ALTER TABLE tasks ADD COLUMN end_reason text;

ALTER TABLE tasks
    ADD CONSTRAINT tasks_end_reason_known
        CHECK (end_reason IN ('cancelled_by_client', 'expired', 'crash_recovery')),
    -- A reason goes with the status it explains, and so only with a finished task.
    ADD CONSTRAINT tasks_end_reason_matches_status
        CHECK (end_reason IS NULL
               OR (end_reason = 'cancelled_by_client' AND status = 'cancelled')
               OR (end_reason IN ('expired', 'crash_recovery') AND status = 'failed')),
    -- The texts come from one place: the reason, or the columns, never both.
    ADD CONSTRAINT tasks_end_reason_or_texts
        CHECK (end_reason IS NULL OR (status_message IS NULL AND error IS NULL));

-- A failed task has an error: stored, or composed from its reason. (coalesce: without a
-- reason the IN is NULL, and a CHECK that is NULL passes.)
ALTER TABLE tasks
    DROP CONSTRAINT tasks_error_iff_failed,
    ADD CONSTRAINT tasks_error_iff_failed
        CHECK ((status = 'failed')
               = (error IS NOT NULL
                  OR coalesce(end_reason IN ('expired', 'crash_recovery'), false)));
