-- The reference notes application (pigeon.reference.notes) and its effect ledger.

-- name: note_get
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM ref_notes
WHERE principal = :principal AND id = :id

-- name: note_lock
-- note_get for a write handler (PostgreSQL locks the row here); SQLite's one writer, taken
-- by BEGIN IMMEDIATE, already keeps every other write out until the commit.
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM ref_notes
WHERE principal = :principal AND id = :id

-- name: note_list
SELECT principal, id, version, data, deleted, clock, created_at, updated_at
FROM ref_notes
WHERE principal = :principal AND deleted = 0
ORDER BY id

-- name: note_create
-- A create: a new note, or a new life for a deleted one (its version goes on); nothing
-- comes back when a live note already has the id, and the handler answers 409. One
-- statement: two creates of one new id racing meet at the primary key, and the second
-- (after the first commits, on PostgreSQL) returns nothing, so it is answered 409 too.
INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
VALUES (:principal, :id, 1, :data, 0, :clock, :now, :now)
ON CONFLICT (principal, id) DO UPDATE
SET version = ref_notes.version + 1, data = excluded.data, deleted = 0, clock = excluded.clock,
    updated_at = excluded.updated_at
WHERE ref_notes.deleted = 1
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: note_write
UPDATE ref_notes
SET version = version + 1, data = :data, deleted = :deleted, clock = :clock,
    updated_at = :now
WHERE principal = :principal AND id = :id
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: ledger_append
INSERT INTO ref_effect_ledger (
    idempotency_key, principal, operation_id, entity, method, status, version, clock,
    applied_at
) VALUES (
    :idempotency_key, :principal, :operation_id, :entity, :method, :status, :version,
    :clock, :now
)

-- name: ledger_all
SELECT seq, idempotency_key, principal, operation_id, entity, method, status, version,
       clock, applied_at
FROM ref_effect_ledger
WHERE seq > :after
ORDER BY seq
LIMIT :limit
