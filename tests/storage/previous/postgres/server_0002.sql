-- Accountable background work on PostgreSQL: the twin of sqlite/migrations/server_0002.sql
-- (same tables and columns; timestamps are float epoch seconds in double precision).
--
-- Index plan: workers claim through two small partial indexes (ready jobs, reserved jobs)
-- that finished jobs leave, so claims stay cheap however much history piles up; every
-- lookup (by id, unique key, status, queue, record, job history) has its own index.

CREATE TABLE pigeon_records (
    id           text PRIMARY KEY,
    kind         text NOT NULL,
    data         text NOT NULL,
    status       text NOT NULL,
    created_at   double precision NOT NULL,
    completed_at double precision
);

CREATE TABLE pigeon_obligations (
    record_id  text NOT NULL REFERENCES pigeon_records (id),
    name       text NOT NULL,
    job_id     bigint,
    status     text NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (record_id, name)
);

CREATE TABLE pigeon_record_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    record_id  text NOT NULL REFERENCES pigeon_records (id),
    obligation text,
    state      text NOT NULL,
    detail     text,
    at         double precision NOT NULL
);

CREATE INDEX pigeon_record_events_record ON pigeon_record_events (record_id, id);

CREATE TABLE pigeon_jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue           text NOT NULL,
    task            text NOT NULL,
    payload         text NOT NULL,
    status          text NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL,
    attempt_base    integer NOT NULL DEFAULT 0,
    max_age         double precision,
    created_at      double precision NOT NULL,
    budget_start    double precision NOT NULL,
    scheduled_at    double precision NOT NULL,
    reserved_until  double precision,
    lease_token     text,
    worker          text,
    started_at      double precision,
    finished_at     double precision,
    last_error      text,
    owner           text,
    record_id       text,
    obligation      text,
    unique_key      text UNIQUE
);

CREATE INDEX pigeon_jobs_ready ON pigeon_jobs (queue, scheduled_at, id)
    WHERE status = 'queued';
CREATE INDEX pigeon_jobs_reserved ON pigeon_jobs (queue, reserved_until)
    WHERE status = 'reserved';
CREATE INDEX pigeon_jobs_status ON pigeon_jobs (status, id);
CREATE INDEX pigeon_jobs_queue ON pigeon_jobs (queue, id);

-- Channel names are identifiers (at most 63 bytes): long queue names are hashed.
CREATE FUNCTION pigeon_jobs_channel(queue text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN octet_length(queue) <= 51 THEN 'pigeon_jobs:' || queue
                ELSE 'pigeon_jobs:' || left(md5(queue), 32) END
$$;

-- Idle workers LISTEN on one channel per queue. Every insert of a queued job notifies its
-- queue's channel inside the inserting transaction, so the wake-up is delivered at commit
-- (never for a rolled-back intake) and a bulk insert sends one notification per queue.
CREATE FUNCTION pigeon_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(pigeon_jobs_channel(q.queue), '')
    FROM (SELECT DISTINCT queue FROM inserted_jobs WHERE status = 'queued') AS q;
    RETURN NULL;
END
$$;

CREATE TRIGGER pigeon_jobs_inserted AFTER INSERT ON pigeon_jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pigeon_jobs_notify();

CREATE TABLE pigeon_job_attempts (
    job_id      bigint NOT NULL REFERENCES pigeon_jobs (id),
    attempt     integer NOT NULL,
    worker      text,
    started_at  double precision NOT NULL,
    finished_at double precision,
    outcome     text NOT NULL,
    error       text,
    PRIMARY KEY (job_id, attempt)
);

-- The planner reads recent successful attempts.
CREATE INDEX pigeon_job_attempts_finished ON pigeon_job_attempts (finished_at)
    WHERE outcome = 'succeeded';

CREATE TABLE pigeon_job_reviews (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint NOT NULL REFERENCES pigeon_jobs (id),
    action   text NOT NULL,
    reviewer text NOT NULL,
    reason   text NOT NULL,
    at       double precision NOT NULL
);

CREATE INDEX pigeon_job_reviews_job ON pigeon_job_reviews (job_id, id);

CREATE TABLE pigeon_outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   text NOT NULL UNIQUE,
    topic        text NOT NULL,
    payload      text NOT NULL,
    created_at   double precision NOT NULL,
    published_at double precision,
    attempts     integer NOT NULL DEFAULT 0,
    last_error   text
);

CREATE INDEX pigeon_outbox_pending ON pigeon_outbox (id) WHERE published_at IS NULL;
CREATE INDEX pigeon_outbox_published ON pigeon_outbox (published_at)
    WHERE published_at IS NOT NULL;

CREATE TABLE pigeon_effects (
    scope      text NOT NULL,
    key        text NOT NULL,
    result     text NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE pigeon_provider_calls (
    reference       text PRIMARY KEY,
    provider        text NOT NULL,
    idempotency_key text NOT NULL UNIQUE,
    request         text NOT NULL,
    status          text NOT NULL,
    result          text,
    attempts        integer NOT NULL DEFAULT 0,
    created_at      double precision NOT NULL,
    updated_at      double precision NOT NULL
);

CREATE TABLE pigeon_schedule_ticks (
    schedule   text NOT NULL,
    tick       bigint NOT NULL,
    job_id     bigint,
    created_at double precision NOT NULL,
    PRIMARY KEY (schedule, tick)
);
