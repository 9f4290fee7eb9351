-- Task payload versions (twin of sqlite/migrations/server_0013.sql; pigeon.jobs.versions):
-- the version of its task's payload shape a job was enqueued with. A worker runs a job of
-- a version it knows (upcasting an older payload) and leaves a newer one for a worker
-- that knows it. Every job enqueued before this migration has the shape of version 1.
-- A constant default: no rewrite of the table.

ALTER TABLE pigeon_jobs ADD COLUMN version integer NOT NULL DEFAULT 1;
