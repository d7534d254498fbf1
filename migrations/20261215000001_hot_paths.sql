-- Hot paths at scale (issue 12).
--
-- Leased rows leave the queue's index and get one of their own, so that
--   * a heartbeat changes only lease_expires_at, which no index covers: a HOT update that
--     writes no index entry;
--   * lease rescue and the reclaim of lapsed leases read only leased rows (a handful per
--     worker), not every runnable task.
-- A claim sets run_after to NULL (it was the lease's expiry, rewritten by every
-- heartbeat). Workers of the previous release, during a rolling deploy, then never take
-- a lease of a new worker for a lapsed one (their claim needs run_after <= now()); the
-- new ones reclaim the old ones' lapsed leases by lease_expires_at. The old index goes:
-- without it the old workers' claims are slower for the length of the deploy, not wrong.
DROP INDEX IF EXISTS tasks_claimable;
CREATE INDEX IF NOT EXISTS tasks_queued ON tasks (run_after)
    WHERE status = 'working' AND lease_owner IS NULL;
CREATE INDEX IF NOT EXISTS tasks_leased ON tasks (id) WHERE lease_owner IS NOT NULL;

-- Room on every page for the new versions of its rows, so heartbeats (and other updates
-- of unindexed columns: watch marks, checkpoints, status messages) stay on the page and
-- HOT. A task row is a few hundred bytes, so a page holds some fifteen; 20 % free keeps
-- room for three or four new versions per page between prunes, which covers the rows of
-- a page that are leased at once. It costs finished history 25 % more pages.
ALTER TABLE tasks SET (fillfactor = 80);
