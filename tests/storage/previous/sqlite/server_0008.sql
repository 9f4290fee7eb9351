-- The library's tables carry the pigeon_ prefix: idempotency_claims becomes
-- pigeon_idempotency_claims, so it cannot collide with an application's own table
-- written through Tx.sql. Its rows move with it; SQLite renames no index, so both
-- indexes are made again under their new names.

ALTER TABLE idempotency_claims RENAME TO pigeon_idempotency_claims;

DROP INDEX idempotency_claims_response_expiry;

DROP INDEX idempotency_claims_claim_expiry;

CREATE INDEX pigeon_idempotency_claims_response_expiry
    ON pigeon_idempotency_claims (response_expires_at);

CREATE INDEX pigeon_idempotency_claims_claim_expiry
    ON pigeon_idempotency_claims (claim_expires_at);
