-- Accountable background work: records and their obligations, jobs with leases and
-- attempts, the failed store's reviews, the outbox, effect claims, provider calls and
-- schedule ticks. Timestamps are float epoch seconds so the PostgreSQL twin stays portable.

CREATE TABLE pigeon_records (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    data         TEXT NOT NULL,
    status       TEXT NOT NULL,
    created_at   REAL NOT NULL,
    completed_at REAL
);

CREATE TABLE pigeon_obligations (
    record_id  TEXT NOT NULL REFERENCES pigeon_records (id),
    name       TEXT NOT NULL,
    job_id     INTEGER,
    status     TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (record_id, name)
);

CREATE TABLE pigeon_record_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id  TEXT NOT NULL REFERENCES pigeon_records (id),
    obligation TEXT,
    state      TEXT NOT NULL,
    detail     TEXT,
    at         REAL NOT NULL
);

CREATE INDEX pigeon_record_events_record ON pigeon_record_events (record_id, id);

CREATE TABLE pigeon_jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    queue           TEXT NOT NULL,
    task            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    attempt_base    INTEGER NOT NULL DEFAULT 0,
    max_age         REAL,
    created_at      REAL NOT NULL,
    budget_start    REAL NOT NULL,
    scheduled_at    REAL NOT NULL,
    reserved_until  REAL,
    lease_token     TEXT,
    worker          TEXT,
    started_at      REAL,
    finished_at     REAL,
    last_error      TEXT,
    owner           TEXT,
    record_id       TEXT,
    obligation      TEXT,
    unique_key      TEXT UNIQUE
);

CREATE INDEX pigeon_jobs_eligible ON pigeon_jobs (queue, status, scheduled_at, id);
CREATE INDEX pigeon_jobs_leases ON pigeon_jobs (queue, status, reserved_until);

CREATE TABLE pigeon_job_attempts (
    job_id      INTEGER NOT NULL REFERENCES pigeon_jobs (id),
    attempt     INTEGER NOT NULL,
    worker      TEXT,
    started_at  REAL NOT NULL,
    finished_at REAL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE pigeon_job_reviews (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id   INTEGER NOT NULL REFERENCES pigeon_jobs (id),
    action   TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    reason   TEXT NOT NULL,
    at       REAL NOT NULL
);

CREATE TABLE pigeon_outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id   TEXT NOT NULL UNIQUE,
    topic        TEXT NOT NULL,
    payload      TEXT NOT NULL,
    created_at   REAL NOT NULL,
    published_at REAL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT
);

CREATE INDEX pigeon_outbox_pending ON pigeon_outbox (published_at, id);

CREATE TABLE pigeon_effects (
    scope      TEXT NOT NULL,
    key        TEXT NOT NULL,
    result     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE pigeon_provider_calls (
    reference       TEXT PRIMARY KEY,
    provider        TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    request         TEXT NOT NULL,
    status          TEXT NOT NULL,
    result          TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);

CREATE TABLE pigeon_schedule_ticks (
    schedule   TEXT NOT NULL,
    tick       INTEGER NOT NULL,
    job_id     INTEGER,
    created_at REAL NOT NULL,
    PRIMARY KEY (schedule, tick)
);
