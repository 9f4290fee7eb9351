-- Task payload versions (pigeon.jobs.versions): the version of its task's payload shape a
-- job was enqueued with. A worker runs a job of a version it knows (upcasting an older
-- payload) and leaves a newer one for a worker that knows it. Every job enqueued before
-- this migration has the shape of version 1.

ALTER TABLE pigeon_jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
