-- Operating the jobs system: retention purges finished jobs oldest first (and their
-- reviews, by job), and one open freshness-breach episode per queue, so the alert fires
-- once per episode however many worker processes watch the queue.

CREATE INDEX pigeon_jobs_finished ON pigeon_jobs (status, finished_at);
CREATE INDEX pigeon_job_reviews_job ON pigeon_job_reviews (job_id, id);

CREATE TABLE pigeon_freshness_breaches (
    queue      TEXT PRIMARY KEY,
    since      REAL NOT NULL,
    age        REAL NOT NULL,
    objective  REAL NOT NULL
);
