-- Compact tombstones (issue 12): a deleted task is remembered by a fixed-size digest of
-- its owner and its id, not by the owner's two texts, so a tombstone costs the same few
-- bytes however long tenant and principal names are.
--
-- The owner stays first in the key, as in `tasks`: a lookup with the wrong owner reads a
-- different part of the index and never reaches another owner's row (no index-hit timing
-- oracle). A digest collision cannot reveal anything either: answering "expired" for
-- another owner's tombstone needs both that owner's task id (unguessable: 94 random bits)
-- and a colliding 64-bit digest (SHA-256 truncated, so a principal cannot be chosen to
-- collide with a given one short of 2^64 tries), and even then it says only that an id
-- the caller already holds belonged to a deleted task.

-- Tenant is length-prefixed so that ('ab', 'c') and ('a', 'bc') differ.
CREATE OR REPLACE FUNCTION mcp_tasks_owner_digest(tenant text, principal text)
RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
    SELECT ('x' || encode(substring(sha256(convert_to(
        length(tenant)::text || ':' || tenant || principal, 'UTF8')) FROM 1 FOR 8), 'hex'))
        ::bit(64)::bigint
$$;

-- 56 bytes of heap tuple (plus its 4-byte line pointer) and 32 of key entry, however long
-- the owner's names.
CREATE TABLE IF NOT EXISTS tombstones (
    owner      bigint      NOT NULL,
    id         uuid        NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, id)
);

-- The purge's order. A btree, not BRIN: purged pages are reused by later tombstones, and
-- a BRIN range summary only ever widens, so after one turn of retention every range
-- would claim old rows and a purge with nothing due would read the whole table.
CREATE INDEX IF NOT EXISTS tombstones_deleted_at ON tombstones (deleted_at);

-- Written in batches and deleted in batches; vacuum by row count, as `tasks` is.
ALTER TABLE tombstones SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000
);

WITH moved AS (
    DELETE FROM task_tombstones RETURNING tenant, principal, id, deleted_at
)
INSERT INTO tombstones (owner, id, deleted_at)
SELECT mcp_tasks_owner_digest(tenant, principal), id, deleted_at FROM moved
ON CONFLICT DO NOTHING;

-- The old table stays, empty, for the length of a rolling deploy: replicas of the
-- previous release still read it (and answer "not found" for tasks deleted since), and
-- its workers still write it; maintenance moves what they write here
-- (`Store::adopt_legacy_tombstones`). A later release drops it.
