-- The operations page (pigeon.ops; twin of sqlite/migrations/server_0007.sql): the operator
-- action log, and the indexes that keep the page's figures off sequential scans of the
-- large tables (each count is bounded by its index; see pigeon/ops/queries.py).

-- One row per action taken from the page (or pigeon.ops.actions): who, when, why, what was
-- selected and what came of it. The per-job reviews stay in pigeon_job_reviews.
CREATE TABLE pigeon_operator_actions (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       double precision NOT NULL,
    actor    text NOT NULL,
    action   text NOT NULL,
    reason   text NOT NULL,
    selection text NOT NULL,
    matched  integer NOT NULL,
    done     integer NOT NULL,
    skipped  integer NOT NULL
);

-- Records received in a window.
CREATE INDEX pigeon_records_created ON pigeon_records (created_at);
-- Obligations by kind and status (distinct kinds by a skip scan, capped counts).
CREATE INDEX pigeon_obligations_name_status ON pigeon_obligations (name, status);
-- The oldest still-owed obligation of a kind: its open job (queued, reserved or failed).
CREATE INDEX pigeon_jobs_owed ON pigeon_jobs (obligation, created_at)
    WHERE obligation IS NOT NULL AND status IN ('queued', 'reserved', 'failed');
-- Failed attempts of the last hour (the succeeded ones have pigeon_job_attempts_finished).
CREATE INDEX pigeon_job_attempts_unsucceeded ON pigeon_job_attempts (finished_at)
    WHERE outcome <> 'succeeded';
-- Effects recorded in a window (the reconciliation panel).
CREATE INDEX pigeon_effects_created ON pigeon_effects (created_at);
-- Estimates of large counts (queue x status, kind x status) come from the planner: these
-- statistics give it the two columns together instead of assuming them independent.
CREATE STATISTICS pigeon_jobs_queue_status (mcv) ON queue, status FROM pigeon_jobs;
CREATE STATISTICS pigeon_obligations_name_status (mcv) ON name, status FROM pigeon_obligations;
