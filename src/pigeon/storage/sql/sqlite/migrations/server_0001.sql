-- The intake's idempotency claims. (The reference application's notes and effect ledger,
-- made here before, are its own component's now: pigeon/reference/sql.)
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
