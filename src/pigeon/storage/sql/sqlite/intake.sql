-- Idempotency claims of the intake (pigeon.server.idempotency_stores).
-- PostgreSQL supplies the same names in postgres/intake.sql with %(name)s parameters.

-- name: claim_insert
INSERT INTO pigeon_idempotency_claims (
    principal, idem_key, fingerprint, method, path, operation_id, state,
    lock_token, locked_until, created_at, claim_expires_at
) VALUES (
    :principal, :idem_key, :fingerprint, :method, :path, :operation_id, 'in_progress',
    :lock_token, :locked_until, :now, :claim_expires_at
)
ON CONFLICT (principal, idem_key) DO NOTHING
RETURNING idem_key

-- name: claim_get
SELECT principal, idem_key, fingerprint, method, path, operation_id, state, lock_token,
       locked_until, status, response_headers, response_body, body_format, created_at,
       completed_at, response_expires_at, claim_expires_at
FROM pigeon_idempotency_claims
WHERE principal = :principal AND idem_key = :idem_key

-- name: claim_take_over
-- Only a dead claim can be taken: an expired lock, or a claim past its retention.
-- The condition is re-checked here so two takers cannot both win.
UPDATE pigeon_idempotency_claims
SET fingerprint = :fingerprint, method = :method, path = :path,
    operation_id = :operation_id, state = 'in_progress', lock_token = :lock_token,
    locked_until = :locked_until, status = NULL, response_headers = NULL,
    response_body = NULL, body_format = NULL, created_at = :now, completed_at = NULL,
    response_expires_at = NULL, claim_expires_at = :claim_expires_at
WHERE principal = :principal AND idem_key = :idem_key
  AND ((state = 'in_progress' AND locked_until <= :now) OR claim_expires_at <= :now)
RETURNING idem_key

-- name: claims_get_many
-- claim_get for a JSON array of keys (:keys): a batch's keys read before anything of it
-- is applied, to tell the free ones from replays, mismatches and keys in progress.
SELECT principal, idem_key, fingerprint, method, path, operation_id, state, lock_token,
       locked_until, status, response_headers, response_body, body_format, created_at,
       completed_at, response_expires_at, claim_expires_at
FROM pigeon_idempotency_claims
WHERE principal = :principal AND idem_key IN (SELECT value FROM json_each(:keys))

-- name: claims_store_many
-- A batch's claims (pigeon.server.idempotency_sets), written once its operations are
-- applied, already completed with their answers: one row's statement, which the store
-- steps for each key in one executemany; the row count is how many were stored (a key
-- with a row keeps it). Positional (no dict per row): principal, idem_key, fingerprint,
-- method, path, operation_id, status, response_headers, response_body, created_at,
-- completed_at, response_expires_at, claim_expires_at. Not a JSON array through
-- json_each as on PostgreSQL: SQLite 3.40 parses an element again for each field read
-- out of it, and this costs a third less.
INSERT INTO pigeon_idempotency_claims (
    principal, idem_key, fingerprint, method, path, operation_id, state, status,
    response_headers, response_body, body_format, created_at, completed_at,
    response_expires_at, claim_expires_at
) VALUES (?, ?, ?, ?, ?, ?, 'completed', ?, ?, ?, 'json', ?, ?, ?, ?)
ON CONFLICT (principal, idem_key) DO NOTHING


-- name: claim_fence
-- Touching the row takes its row lock on PostgreSQL for the rest of the transaction.
UPDATE pigeon_idempotency_claims
SET locked_until = locked_until
WHERE principal = :principal AND idem_key = :idem_key
  AND state = 'in_progress' AND lock_token = :lock_token
RETURNING idem_key

-- name: claim_renew
-- The holder is still running (IdempotencyMiddleware): push the lock timeout on, so a
-- retry keeps meeting "in progress" instead of taking the key over and running twice.
UPDATE pigeon_idempotency_claims
SET locked_until = :locked_until
WHERE principal = :principal AND idem_key = :idem_key
  AND state = 'in_progress' AND lock_token = :lock_token
RETURNING idem_key

-- name: claim_complete
UPDATE pigeon_idempotency_claims
SET state = 'completed', status = :status, response_headers = :response_headers,
    response_body = :response_body, body_format = :body_format, completed_at = :now,
    response_expires_at = :response_expires_at, lock_token = NULL, locked_until = NULL
WHERE principal = :principal AND idem_key = :idem_key
  AND state = 'in_progress' AND lock_token = :lock_token
RETURNING idem_key

-- name: claim_complete_last
-- claim_complete as the last statement of the application's transaction: on SQLite the
-- caller reads its row before committing (no row: the claim was lost, nothing commits).
UPDATE pigeon_idempotency_claims
SET state = 'completed', status = :status, response_headers = :response_headers,
    response_body = :response_body, body_format = :body_format, completed_at = :now,
    response_expires_at = :response_expires_at, lock_token = NULL, locked_until = NULL
WHERE principal = :principal AND idem_key = :idem_key
  AND state = 'in_progress' AND lock_token = :lock_token
RETURNING idem_key AS stored

-- name: claim_release
DELETE FROM pigeon_idempotency_claims
WHERE principal = :principal AND idem_key = :idem_key
  AND state = 'in_progress' AND lock_token = :lock_token
RETURNING idem_key

-- name: purge_responses
-- At most :limit rows per call (the caller loops, one short transaction per batch).
-- response_expires_at goes to NULL with the body: a purged row leaves the expiry index's
-- range, so later rounds never walk past what earlier ones already purged. Nothing reads
-- the expiry of a purged response (no body: "already applied", whatever the time).
UPDATE pigeon_idempotency_claims
SET response_body = NULL, response_headers = NULL, response_expires_at = NULL
WHERE rowid IN (
        SELECT rowid
        FROM pigeon_idempotency_claims
        WHERE response_expires_at <= :now AND response_body IS NOT NULL
          AND state = 'completed'
        ORDER BY response_expires_at
        LIMIT :limit)
RETURNING idem_key

-- name: purge_claims
DELETE FROM pigeon_idempotency_claims
WHERE rowid IN (
        SELECT rowid
        FROM pigeon_idempotency_claims
        WHERE claim_expires_at <= :now AND (state = 'completed' OR locked_until <= :now)
        ORDER BY claim_expires_at
        LIMIT :limit)
RETURNING idem_key

-- name: claim_stats
SELECT count(*) AS claims,
       coalesce(sum(CASE WHEN state = 'in_progress' THEN 1 ELSE 0 END), 0) AS in_progress,
       coalesce(sum(CASE WHEN response_body IS NOT NULL THEN 1 ELSE 0 END), 0) AS responses
FROM pigeon_idempotency_claims

-- name: health_probe
SELECT 1 AS ok

-- name: replay_read_only
-- The replay hook's transaction (IdempotencyStore.read_only): a connection setting
-- on SQLite, so replay_read_write hands the connection back writable afterwards.
PRAGMA query_only = ON

-- name: replay_read_write
PRAGMA query_only = OFF
