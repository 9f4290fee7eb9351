-- The reference notes application (pigeon.server.notes) and its effect ledger: the same
-- names and meaning as sqlite/notes.sql.

-- name: note_get
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM notes
WHERE principal = %(principal)s AND id = %(id)s

-- name: note_list
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM notes
WHERE principal = %(principal)s AND deleted = 0
ORDER BY id

-- name: note_insert
-- A plain INSERT, as on SQLite: two creates of one new id race on the primary key and
-- the loser's operation fails (rolled back, retried, then answered 409 "exists").
INSERT INTO notes (principal, id, version, data, deleted, clock, created_at, updated_at)
VALUES (%(principal)s, %(id)s, 1, %(data)s, 0, %(clock)s, %(now)s, %(now)s)
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: note_write
UPDATE notes
SET version = version + 1, data = %(data)s, deleted = %(deleted)s, clock = %(clock)s,
    updated_at = %(now)s
WHERE principal = %(principal)s AND id = %(id)s
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: ledger_append
INSERT INTO effect_ledger (
    idempotency_key, principal, operation_id, entity, method, status, version, clock,
    applied_at
) VALUES (
    %(idempotency_key)s, %(principal)s, %(operation_id)s, %(entity)s, %(method)s,
    %(status)s, %(version)s, %(clock)s, %(now)s
)

-- name: ledger_all
SELECT seq, idempotency_key, principal, operation_id, entity, method, status, version,
       clock, applied_at
FROM effect_ledger
WHERE seq > %(after)s
ORDER BY seq
LIMIT %(limit)s
