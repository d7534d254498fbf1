-- Idempotent creation: a client that retries a tools/call after a lost response sends the
-- same Idempotency-Key and gets the same task. Keys are scoped to the owner and live as
-- long as the task row.
ALTER TABLE tasks
    ADD COLUMN idempotency_key text,
    ADD COLUMN request_digest text;

CREATE UNIQUE INDEX tasks_idempotency
    ON tasks (tenant, principal, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
