-- The workers' registry (twin of sqlite/migrations/server_0014.sql; pigeon.jobs.registry):
-- a row per worker process, written at its start, renewed while it runs and deleted when
-- it stops, saying which queues it serves and which payload version of each task its app
-- runs (JSON text). A job of a newer version than any live worker of its queue knows
-- waits for a newer worker: the operations page and `pigeon jobs stats` count those, per
-- task.
CREATE TABLE pigeon_workers (
    name        text PRIMARY KEY,
    origin      text NOT NULL,
    queues      text NOT NULL,
    versions    text NOT NULL,
    started_at  double precision NOT NULL,
    seen_at     double precision NOT NULL
);

-- The live jobs of versioned tasks, for those counts: a job of version 1 never waits for
-- a newer worker (every worker runs version 1).
CREATE INDEX pigeon_jobs_versioned ON pigeon_jobs (task, version)
    WHERE version > 1 AND status IN ('queued', 'reserved');
