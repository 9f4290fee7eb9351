-- The operations page (pigeon.ops): the operator action log, and the indexes that keep the
-- page's figures off full scans of the large tables (see pigeon/ops/queries.py).

-- One row per action taken from the page (or pigeon.ops.actions): who, when, why, what was
-- selected and what came of it. The per-job reviews stay in pigeon_job_reviews.
CREATE TABLE pigeon_operator_actions (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        REAL NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    reason    TEXT NOT NULL,
    selection TEXT NOT NULL,
    matched   INTEGER NOT NULL,
    done      INTEGER NOT NULL,
    skipped   INTEGER NOT NULL
);

CREATE INDEX pigeon_records_created ON pigeon_records (created_at);
CREATE INDEX pigeon_obligations_name_status ON pigeon_obligations (name, status);
CREATE INDEX pigeon_jobs_owed ON pigeon_jobs (obligation, created_at)
    WHERE obligation IS NOT NULL AND status IN ('queued', 'reserved', 'failed');
CREATE INDEX pigeon_job_attempts_unsucceeded ON pigeon_job_attempts (finished_at)
    WHERE outcome <> 'succeeded';
CREATE INDEX pigeon_effects_created ON pigeon_effects (created_at);
