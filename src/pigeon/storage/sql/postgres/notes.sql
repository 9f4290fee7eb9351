-- The reference notes application (pigeon.reference.notes) and its effect ledger: the same
-- names and meaning as sqlite/notes.sql.

-- name: note_get
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM ref_notes
WHERE principal = %(principal)s AND id = %(id)s

-- name: note_lock
-- note_get for a write handler: the row stays locked until the commit, so a concurrent
-- write of the note (another intake process, or a request beside this one) reads it only
-- after this one's version is in: its If-Match is checked, and its merge patch applied,
-- against the latest version, never against the one both read first (a lost update).
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM ref_notes
WHERE principal = %(principal)s AND id = %(id)s
FOR UPDATE

-- name: note_list
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM ref_notes
WHERE principal = %(principal)s AND deleted = 0
ORDER BY id

-- name: note_create
-- A create: a new note, or a new life for a deleted one (its version goes on); nothing
-- comes back when a live note already has the id, and the handler answers 409. One
-- statement: two creates of one new id racing meet at the primary key, and the second
-- (after the first commits, on PostgreSQL) returns nothing, so it is answered 409 too.
INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
VALUES (%(principal)s, %(id)s, 1, %(data)s, 0, %(clock)s, %(now)s, %(now)s)
ON CONFLICT (principal, id) DO UPDATE
SET version = ref_notes.version + 1, data = excluded.data, deleted = 0, clock = excluded.clock,
    updated_at = excluded.updated_at
WHERE ref_notes.deleted = 1
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: note_write
UPDATE ref_notes
SET version = version + 1, data = %(data)s, deleted = %(deleted)s, clock = %(clock)s,
    updated_at = %(now)s
WHERE principal = %(principal)s AND id = %(id)s
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: ledger_append
INSERT INTO ref_effect_ledger (
    idempotency_key, principal, operation_id, entity, method, status, version, clock,
    applied_at
) VALUES (
    %(idempotency_key)s, %(principal)s, %(operation_id)s, %(entity)s, %(method)s,
    %(status)s, %(version)s, %(clock)s, %(now)s
)

-- name: ledger_all
SELECT seq, idempotency_key, principal, operation_id, entity, method, status, version,
       clock, applied_at
FROM ref_effect_ledger
WHERE seq > %(after)s
ORDER BY seq
LIMIT %(limit)s
