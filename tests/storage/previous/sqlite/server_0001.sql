-- The intake's idempotency claims and the reference notes application.
-- Timestamps are float epoch seconds (REAL here, double precision on PostgreSQL).

-- One row per (principal, key). The row outlives its stored response: the response is
-- nulled after response_expires_at, the row itself deleted after claim_expires_at, so an
-- old key still answers "already applied" instead of running a second time.
CREATE TABLE idempotency_claims (
    principal           TEXT NOT NULL,
    idem_key            TEXT NOT NULL,
    fingerprint         TEXT NOT NULL,
    method              TEXT NOT NULL,
    path                TEXT NOT NULL,
    operation_id        TEXT NOT NULL,
    state               TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    lock_token          TEXT,
    locked_until        REAL,
    status              INTEGER,
    response_headers    TEXT,
    response_body       TEXT,
    body_format         TEXT,
    created_at          REAL NOT NULL,
    completed_at        REAL,
    response_expires_at REAL,
    claim_expires_at    REAL NOT NULL,
    PRIMARY KEY (principal, idem_key)
);

CREATE INDEX idempotency_claims_response_expiry
    ON idempotency_claims (response_expires_at);

CREATE INDEX idempotency_claims_claim_expiry
    ON idempotency_claims (claim_expires_at);

-- Notes are scoped by principal like the keys that write them. Deleted notes stay as
-- tombstones so the version keeps rising if the same id is created again.
CREATE TABLE notes (
    principal  TEXT NOT NULL,
    id         TEXT NOT NULL,
    version    INTEGER NOT NULL,
    data       TEXT NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0,
    clock      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (principal, id)
);

-- One row per applied operation. Deliberately no unique constraint on the key: a double
-- effect must show up here as two rows, not be hidden by a constraint error.
CREATE TABLE effect_ledger (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL,
    principal       TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    entity          TEXT NOT NULL,
    method          TEXT NOT NULL,
    status          INTEGER NOT NULL,
    version         INTEGER,
    clock           TEXT NOT NULL,
    applied_at      REAL NOT NULL
);

CREATE INDEX effect_ledger_entity ON effect_ledger (entity, seq);
