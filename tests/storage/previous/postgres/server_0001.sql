-- The intake's idempotency claims and the reference notes application: the PostgreSQL
-- twin of sqlite/migrations/server_0001.sql (0002 holds the jobs tables, as on SQLite).
-- Timestamps are double precision epoch seconds, exactly the floats the code passes.

-- One row per (principal, key); the primary key is the claim: a concurrent inserter of
-- the same key waits on the unique index until the holder commits or rolls back.
CREATE TABLE idempotency_claims (
    principal           text NOT NULL,
    idem_key            text NOT NULL,
    fingerprint         text NOT NULL,
    method              text NOT NULL,
    path                text NOT NULL,
    operation_id        text NOT NULL,
    state               text NOT NULL CHECK (state IN ('in_progress', 'completed')),
    lock_token          text,
    locked_until        double precision,
    status              integer,
    response_headers    text,
    response_body       text,
    body_format         text,
    created_at          double precision NOT NULL,
    completed_at        double precision,
    response_expires_at double precision,
    claim_expires_at    double precision NOT NULL,
    PRIMARY KEY (principal, idem_key)
);

-- Partial: once a response is purged its row leaves this index, so the purge scan only
-- ever walks the responses still to be purged.
CREATE INDEX idempotency_claims_response_expiry
    ON idempotency_claims (response_expires_at)
    WHERE response_body IS NOT NULL;

CREATE INDEX idempotency_claims_claim_expiry
    ON idempotency_claims (claim_expires_at);

CREATE TABLE notes (
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
CREATE TABLE effect_ledger (
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

CREATE INDEX effect_ledger_entity ON effect_ledger (entity, seq);
