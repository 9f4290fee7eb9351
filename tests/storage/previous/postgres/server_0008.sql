-- The library's tables carry the pigeon_ prefix (twin of sqlite/migrations/server_0008.sql):
-- idempotency_claims becomes pigeon_idempotency_claims, its rows, key and indexes with it.

ALTER TABLE idempotency_claims RENAME TO pigeon_idempotency_claims;

ALTER INDEX idempotency_claims_pkey RENAME TO pigeon_idempotency_claims_pkey;

ALTER INDEX idempotency_claims_response_expiry
    RENAME TO pigeon_idempotency_claims_response_expiry;

ALTER INDEX idempotency_claims_claim_expiry RENAME TO pigeon_idempotency_claims_claim_expiry;
