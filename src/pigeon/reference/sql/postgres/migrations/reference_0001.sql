-- The reference application's tables, its own schema component: the PostgreSQL twin of
-- ../../sqlite/migrations/reference_0001.sql. Timestamps are double precision epoch seconds.
--
-- IF NOT EXISTS throughout: a database made before the reference app had a component of
-- its own has these tables already, made by the server's migrations (server_0001, _0003,
-- renamed by _0009); they are adopted as they are, rows and all.

CREATE TABLE IF NOT EXISTS ref_notes (
    principal  text NOT NULL,
    id         text NOT NULL,
    version    integer NOT NULL,
    data       text NOT NULL,
    deleted    integer NOT NULL DEFAULT 0,
    clock      text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (principal, id)
);

-- No unique constraint on the key, on purpose: a double effect must show up as two rows.
-- seq comes from a sequence, so it is allocation order, not commit order; writes to one
-- entity are serialised by the note's row lock, so per-entity order still holds.
CREATE TABLE IF NOT EXISTS ref_effect_ledger (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL,
    principal       text NOT NULL,
    operation_id    text NOT NULL,
    entity          text NOT NULL,
    method          text NOT NULL,
    status          integer NOT NULL,
    version         integer,
    clock           text NOT NULL,
    applied_at      double precision NOT NULL
);

CREATE INDEX IF NOT EXISTS ref_effect_ledger_entity ON ref_effect_ledger (entity, seq);

CREATE TABLE IF NOT EXISTS ref_resources (
    principal  text NOT NULL,
    collection text NOT NULL,
    id         text NOT NULL,
    version    integer NOT NULL,
    data       text NOT NULL,
    deleted    integer NOT NULL DEFAULT 0,
    clock      text NOT NULL,
    raw_clock  text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (principal, collection, id)
);

CREATE TABLE IF NOT EXISTS ref_write_outcomes (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    principal       text NOT NULL,
    collection      text NOT NULL,
    id              text NOT NULL,
    idempotency_key text NOT NULL,
    operation_id    text NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN ('won', 'lost', 'merged')),
    clock           text NOT NULL,
    raw_clock       text NOT NULL,
    other_clock     text,
    version         integer NOT NULL,
    payload         text NOT NULL,
    recorded_at     double precision NOT NULL
);

CREATE INDEX IF NOT EXISTS ref_write_outcomes_resource
    ON ref_write_outcomes (principal, collection, id, seq);
