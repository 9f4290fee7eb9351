-- Principals whose access was revoked (twin of sqlite/migrations/server_0006.sql): a
-- task's access re-check reads it before the work runs.

CREATE TABLE pigeon_revoked_principals (
    principal   text PRIMARY KEY,
    revoked_at  double precision NOT NULL,
    reason      text NOT NULL
);
