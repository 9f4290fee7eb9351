-- Operating the jobs system (twin of sqlite/migrations/server_0004.sql): retention purges
-- finished jobs oldest first through a partial index that live jobs never enter, and one
-- open freshness-breach episode per queue, so the alert fires once per episode however
-- many worker processes and nodes watch the queue.

CREATE INDEX pigeon_jobs_finished ON pigeon_jobs (finished_at, id)
    WHERE status IN ('succeeded', 'cancelled');
CREATE INDEX pigeon_jobs_failed ON pigeon_jobs (owner, queue) WHERE status = 'failed';

CREATE TABLE pigeon_freshness_breaches (
    queue      text PRIMARY KEY,
    since      double precision NOT NULL,
    age        double precision NOT NULL,
    objective  double precision NOT NULL
);
