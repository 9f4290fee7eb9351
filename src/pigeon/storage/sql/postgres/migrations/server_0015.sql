-- The owed jobs' index, as SQLite's server_0015 makes it: the same three statuses as
-- comparisons instead of an IN list (which SQLite reads through a table it fills again
-- for each row written). PostgreSQL reads either alike; the two schemas stay one.
DROP INDEX pigeon_jobs_owed;

CREATE INDEX pigeon_jobs_owed ON pigeon_jobs (obligation, created_at)
    WHERE obligation IS NOT NULL
      AND (status = 'queued' OR status = 'reserved' OR status = 'failed');
