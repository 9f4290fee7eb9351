-- The owed jobs' index named three statuses in an IN list, which SQLite reads through a
-- temporary b-tree that, in a partial index's WHERE, it fills again for every job row it
-- writes (before and after the write: twice a status change). The same three statuses
-- as comparisons cost no table. oldest_owed, which reads the index, says the same.
DROP INDEX pigeon_jobs_owed;

CREATE INDEX pigeon_jobs_owed ON pigeon_jobs (obligation, created_at)
    WHERE obligation IS NOT NULL
      AND (status = 'queued' OR status = 'reserved' OR status = 'failed');
