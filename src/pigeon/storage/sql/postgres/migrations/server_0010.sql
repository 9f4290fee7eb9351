-- The started marker (twin of sqlite/migrations/server_0010.sql). A job's started_at is
-- now set when its attempt begins running, not when it is claimed: NULL in between, while
-- the job sits claimed behind a busy thread. Such a job still waits, and the queue's
-- figures (ready, the oldest waiting age, the freshness alert) count it as waiting.
-- claimed_at keeps when the claim was made. A nullable column with no default: no rewrite.

ALTER TABLE pigeon_jobs ADD COLUMN claimed_at double precision;

-- Reserved jobs of before this migration were started at their claim.
UPDATE pigeon_jobs SET claimed_at = started_at WHERE status = 'reserved';

-- Claimed, not started: few rows (at most what workers prefetch), read by every look at
-- a queue's backlog and its oldest waiting job.
CREATE INDEX pigeon_jobs_unstarted ON pigeon_jobs (queue, scheduled_at)
    WHERE status = 'reserved' AND started_at IS NULL;
