-- Principals whose access was revoked (pigeon.jobs.access): a task's access re-check
-- reads it before the work runs, so a job whose principal lost access fails, for good.

CREATE TABLE pigeon_revoked_principals (
    principal   TEXT PRIMARY KEY,
    revoked_at  REAL NOT NULL,
    reason      TEXT NOT NULL
);
