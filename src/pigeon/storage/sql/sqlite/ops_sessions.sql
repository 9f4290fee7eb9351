-- Named queries of the operations page's browser sessions and sign-in limiter
-- (pigeon/ops/session.py, pigeon/ops/signin_limit.py), SQLite; the twin file of the other
-- backend has the same names with the same meaning.

-- name: session_insert
INSERT INTO pigeon_ops_sessions (id_hash, credential, name, created_at, seen_at, expires_at)
VALUES (:id_hash, :credential, :name, :now, :now, :expires_at)

-- name: session_purge
-- Sessions past their lifetime or idle too long: nothing can use them any more.
DELETE FROM pigeon_ops_sessions WHERE expires_at <= :now OR seen_at <= :idle_before

-- name: session_get
SELECT credential, name, created_at, seen_at, expires_at FROM pigeon_ops_sessions
WHERE id_hash = :id_hash

-- name: session_touch
UPDATE pigeon_ops_sessions SET seen_at = :now WHERE id_hash = :id_hash

-- name: session_delete
DELETE FROM pigeon_ops_sessions WHERE id_hash = :id_hash

-- name: signin_blocks
-- The client's row and the row of all clients ('*'), if they have any.
SELECT client, failures, blocked_until FROM pigeon_ops_signin_failures
WHERE client = :client OR client = '*'

-- name: signin_failed
-- One more failure of a client (or of '*'), counted from 1 again after a quiet spell.
INSERT INTO pigeon_ops_signin_failures (client, failures, last_at, blocked_until)
VALUES (:client, 1, :now, 0)
ON CONFLICT (client) DO UPDATE SET
    failures = CASE WHEN pigeon_ops_signin_failures.last_at < :forget_before THEN 1
                    ELSE pigeon_ops_signin_failures.failures + 1 END,
    last_at = excluded.last_at
RETURNING failures

-- name: signin_block
UPDATE pigeon_ops_signin_failures SET blocked_until = :until WHERE client = :client

-- name: signin_forget
DELETE FROM pigeon_ops_signin_failures WHERE client = :client

-- name: signin_purge
-- Clients quiet for long and no longer blocked: their count would start from 1 anyway.
DELETE FROM pigeon_ops_signin_failures
WHERE last_at < :before AND blocked_until < :now
