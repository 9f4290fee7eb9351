-- Idempotency claims of the intake (pigeon.server.idempotency_stores): the
-- same names and meaning as sqlite/intake.sql. Under READ COMMITTED a second inserter of
-- a key waits on the primary key until the first commits (then ON CONFLICT DO NOTHING
-- and the next statement's fresh snapshot sees the winner's row) or rolls back (then it
-- inserts). UPDATEs re-check their WHERE on the latest row version after waiting for its
-- lock, so a take-over, a fence or a completion can only win once.

-- name: claim_insert
-- A duplicate of a request whose transaction is still open waits here, on the unique
-- index, for that transaction to end. The wait is bounded by %(claim_wait)s (lock_timeout
-- for this statement alone: set first, in the materialised CTE, and put back as the
-- statement ends), after which PostgreSQL raises lock_not_available (55P03) and the
-- intake answers 409 "in progress" instead of holding the duplicate for the original's
-- whole duration. Always one row: idem_key is NULL when the key was already taken.
WITH bound AS MATERIALIZED (
    SELECT current_setting('lock_timeout') AS previous,
           set_config('lock_timeout', %(claim_wait)s, true) AS waiting
), inserted AS (
    INSERT INTO pigeon_idempotency_claims (
        principal, idem_key, fingerprint, method, path, operation_id, state,
        lock_token, locked_until, created_at, claim_expires_at
    )
    SELECT %(principal)s, %(idem_key)s, %(fingerprint)s, %(method)s, %(path)s,
           %(operation_id)s, 'in_progress', %(lock_token)s, %(locked_until)s, %(now)s,
           %(claim_expires_at)s
    FROM bound
    ON CONFLICT (principal, idem_key) DO NOTHING
    RETURNING idem_key
)
SELECT (SELECT idem_key FROM inserted) AS idem_key,
       set_config('lock_timeout', previous, true) AS restored
FROM bound

-- name: claim_get
SELECT principal, idem_key, fingerprint, method, path, operation_id, state, lock_token,
       locked_until, status, response_headers, response_body, body_format, created_at,
       completed_at, response_expires_at, claim_expires_at
FROM pigeon_idempotency_claims
WHERE principal = %(principal)s AND idem_key = %(idem_key)s

-- name: claim_take_over
-- Only a dead claim can be taken: an expired lock, or a claim past its retention. A live
-- holder in separate claim mode keeps the row locked (claim_fence) while it works: the
-- wait for that lock is bounded as in claim_insert, then 55P03 answers 409. Always one
-- row: idem_key is NULL when nothing was taken.
WITH bound AS MATERIALIZED (
    SELECT current_setting('lock_timeout') AS previous,
           set_config('lock_timeout', %(claim_wait)s, true) AS waiting
), taken AS (
    UPDATE pigeon_idempotency_claims
    SET fingerprint = %(fingerprint)s, method = %(method)s, path = %(path)s,
        operation_id = %(operation_id)s, state = 'in_progress', lock_token = %(lock_token)s,
        locked_until = %(locked_until)s, status = NULL, response_headers = NULL,
        response_body = NULL, body_format = NULL, created_at = %(now)s, completed_at = NULL,
        response_expires_at = NULL, claim_expires_at = %(claim_expires_at)s
    WHERE principal = %(principal)s AND idem_key = %(idem_key)s
      AND ((state = 'in_progress' AND locked_until <= %(now)s) OR claim_expires_at <= %(now)s)
      AND (SELECT waiting IS NOT NULL FROM bound)
    RETURNING idem_key
)
SELECT (SELECT idem_key FROM taken) AS idem_key,
       set_config('lock_timeout', previous, true) AS restored
FROM bound

-- name: claims_store_many
-- A batch's claims (pigeon.server.idempotency_sets), written once its operations are
-- applied, already completed with their answers, in one statement, as sqlite/intake.sql:
-- :claims is a JSON array of [idem_key, fingerprint, method, path, operation_id, status,
-- response_headers (JSON text), response_body (text)], each key once, each free when the
-- batch read it. A key another transaction claimed since is waited for as long as
-- claim_insert waits (then 55P03: the batch runs one operation at a time, and that key
-- answers 409), and once that claim is committed the INSERT fails (23505: the batch is
-- given up, and runs one operation at a time). No ON CONFLICT: its speculative insertion
-- cost PostgreSQL a third of the statement, for a race that gives the batch up anyway.
-- One row: how many were stored (pigeon's own transaction sends it with the COMMIT and
-- reads no count: it stores every row or fails, and then the COMMIT is skipped).
WITH bound AS MATERIALIZED (
    SELECT current_setting('lock_timeout') AS previous,
           set_config('lock_timeout', %(claim_wait)s, true) AS waiting
), inserted AS (
    INSERT INTO pigeon_idempotency_claims (
        principal, idem_key, fingerprint, method, path, operation_id, state, status,
        response_headers, response_body, body_format, created_at, completed_at,
        response_expires_at, claim_expires_at
    )
    SELECT %(principal)s, c.v ->> 0, c.v ->> 1, c.v ->> 2, c.v ->> 3, c.v ->> 4,
           'completed', (c.v ->> 5)::integer, c.v ->> 6, c.v ->> 7, 'json', %(created_at)s,
           %(now)s, %(response_expires_at)s, %(claim_expires_at)s
    FROM bound, jsonb_array_elements(%(claims)s::jsonb) AS c(v)
    RETURNING idem_key
)
SELECT (SELECT count(*) FROM inserted) AS taken,
       set_config('lock_timeout', previous, true) AS restored
FROM bound

-- name: claims_get_many
-- claim_get for a JSON array of keys (:keys): a batch's keys read before anything of it
-- is applied, to tell the free ones from replays, mismatches and keys in progress. One
-- lookup of the primary key, whole, per key, whatever PostgreSQL knows of the table: as
-- an array (= ANY), a plan made while the table was empty (a new deployment's prepared
-- statement, kept as the table grows) took the key's first column alone and filtered a
-- principal's every claim; joined, without statistics, it hashed them all. OFFSET 0 keeps
-- the lateral subquery from being pulled up into such a join
-- (tests/storage/test_pg_indexes.py).
SELECT c.principal, c.idem_key, c.fingerprint, c.method, c.path, c.operation_id, c.state,
       c.lock_token, c.locked_until, c.status, c.response_headers, c.response_body,
       c.body_format, c.created_at, c.completed_at, c.response_expires_at, c.claim_expires_at
FROM jsonb_array_elements_text(%(keys)s::jsonb) AS k(idem_key)
CROSS JOIN LATERAL (
    SELECT * FROM pigeon_idempotency_claims AS one
    WHERE one.principal = %(principal)s AND one.idem_key = k.idem_key
    OFFSET 0
) AS c

-- name: claim_fence
-- A row lock for the rest of the work's transaction, and no new row version: a duplicate's
-- claim_insert then meets the committed in-progress row and answers 409 at once, where an
-- UPDATE here made it wait on the unique index for the whole of the work. A taker's
-- claim_take_over waits on this lock (bounded), so a live holder is never taken over.
SELECT idem_key
FROM pigeon_idempotency_claims
WHERE principal = %(principal)s AND idem_key = %(idem_key)s
  AND state = 'in_progress' AND lock_token = %(lock_token)s
FOR UPDATE

-- name: claim_renew
-- The holder is still running (IdempotencyMiddleware): push the lock timeout on, so a
-- retry keeps meeting "in progress" instead of taking the key over and running twice.
UPDATE pigeon_idempotency_claims
SET locked_until = %(locked_until)s
WHERE principal = %(principal)s AND idem_key = %(idem_key)s
  AND state = 'in_progress' AND lock_token = %(lock_token)s
RETURNING idem_key

-- name: claim_complete
UPDATE pigeon_idempotency_claims
SET state = 'completed', status = %(status)s, response_headers = %(response_headers)s,
    response_body = %(response_body)s, body_format = %(body_format)s,
    completed_at = %(now)s, response_expires_at = %(response_expires_at)s,
    lock_token = NULL, locked_until = NULL
WHERE principal = %(principal)s AND idem_key = %(idem_key)s
  AND state = 'in_progress' AND lock_token = %(lock_token)s
RETURNING idem_key

-- name: claim_complete_last
-- claim_complete as the last statement of the application's transaction, sent in one
-- round trip with its COMMIT (pigeon.integrations, psycopg's pipeline mode): its answer
-- comes back after the commit, too late to refuse it. So a claim that is no longer this
-- transaction's fails the statement itself (a division by zero), and PostgreSQL skips
-- the COMMIT sent behind it: the transaction is rolled back, nothing of it committed.
WITH completed AS (
    UPDATE pigeon_idempotency_claims
    SET state = 'completed', status = %(status)s, response_headers = %(response_headers)s,
        response_body = %(response_body)s, body_format = %(body_format)s,
        completed_at = %(now)s, response_expires_at = %(response_expires_at)s,
        lock_token = NULL, locked_until = NULL
    WHERE principal = %(principal)s AND idem_key = %(idem_key)s
      AND state = 'in_progress' AND lock_token = %(lock_token)s
    RETURNING idem_key
)
SELECT 1 / (SELECT count(*) FROM completed) AS stored

-- name: claim_release
DELETE FROM pigeon_idempotency_claims
WHERE principal = %(principal)s AND idem_key = %(idem_key)s
  AND state = 'in_progress' AND lock_token = %(lock_token)s
RETURNING idem_key

-- name: purge_responses
-- At most %(limit)s rows per call (the caller loops, one short transaction per batch);
-- SKIP LOCKED: the purge never waits behind, nor blocks, a request holding a key. The
-- rows are addressed by ctid (a TID scan: no join plan can turn into a table scan) and
-- the condition is checked again, so a row changed meanwhile is left for the next round.
-- response_expires_at goes to NULL with the body, so a purged row leaves the expiry
-- index's range and later rounds never walk past it again.
UPDATE pigeon_idempotency_claims
SET response_body = NULL, response_headers = NULL, response_expires_at = NULL
WHERE ctid = ANY (ARRAY(
        SELECT ctid
        FROM pigeon_idempotency_claims
        WHERE response_body IS NOT NULL AND response_expires_at <= %(now)s
          AND state = 'completed'
        ORDER BY response_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
  AND response_body IS NOT NULL AND response_expires_at <= %(now)s AND state = 'completed'
RETURNING idem_key

-- name: purge_claims
DELETE FROM pigeon_idempotency_claims
WHERE ctid = ANY (ARRAY(
        SELECT ctid
        FROM pigeon_idempotency_claims
        WHERE claim_expires_at <= %(now)s AND (state = 'completed' OR locked_until <= %(now)s)
        ORDER BY claim_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
  AND claim_expires_at <= %(now)s AND (state = 'completed' OR locked_until <= %(now)s)
RETURNING idem_key

-- name: claim_stats
SELECT count(*) AS claims,
       count(*) FILTER (WHERE state = 'in_progress') AS in_progress,
       count(*) FILTER (WHERE response_body IS NOT NULL) AS responses
FROM pigeon_idempotency_claims

-- name: health_probe
SELECT 1 AS ok

-- name: replay_read_only
-- The replay hook's transaction (IdempotencyStore.read_only); the first statement.
SET TRANSACTION READ ONLY
