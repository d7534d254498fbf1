-- Worker processes (issue 15's health page lists them idle or busy). A worker registers
-- as it starts, refreshes `last_seen_at` every `refresh_ms`, and deletes its row when it
-- stops cleanly; one that died stops refreshing, so it reads as gone after a few missed
-- refreshes, and maintenance forgets it after a long while.
--
-- One row per process, so the table stays tiny and is read whole. The only index is the
-- key, which a refresh never changes: refreshes are HOT updates (the low fillfactor keeps
-- room on the page for their new versions).
CREATE TABLE IF NOT EXISTS workers (
    -- The worker's lease-owner name (`tasks.lease_owner` of what it runs).
    id           text PRIMARY KEY,
    -- The tools it claims (an empty list: any tool).
    tools        text[]      NOT NULL,
    host         text,
    pid          integer,
    concurrency  integer     NOT NULL,
    -- Its refresh interval: readers count it gone after three missed refreshes.
    refresh_ms   integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);
