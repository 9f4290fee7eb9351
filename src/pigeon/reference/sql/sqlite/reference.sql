-- The reference application's named queries (pigeon.reference.schema runs them through the
-- transaction's own SQL, never through the server's query set): notes and the effect ledger,
-- then the server-resolved resources and their write outcomes.

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
-- A new version of a note with :data, or its own stored (sealed) data where :data is NULL
-- (a delete keeps it).
UPDATE ref_notes
SET version = version + 1, data = coalesce(:data, data), deleted = :deleted,
    clock = :clock, updated_at = :now
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

-- name: notes_create_many
-- note_create for many notes at once (pigeon.reference.notes_many): :notes is a JSON array
-- of [id, data, clock], each id once. The ids that come back were created (or a deleted
-- note's new life); the others are live notes, whose creates the handler answers 409.
INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
SELECT :principal, n.value ->> '$[0]', 1, n.value ->> '$[1]', 0, n.value ->> '$[2]', :now, :now
FROM json_each(:notes) AS n
WHERE true
ON CONFLICT (principal, id) DO UPDATE
SET version = ref_notes.version + 1, data = excluded.data, deleted = 0, clock = excluded.clock,
    updated_at = excluded.updated_at
WHERE ref_notes.deleted = 1
RETURNING id, version, updated_at

-- name: notes_lock_many
-- note_lock for a JSON array of ids (:ids): SQLite's one writer holds them already. The
-- data comes back only with :with_data (a patch merges into it; a replace or a delete does
-- not read it).
SELECT principal, id, version, CASE WHEN :with_data THEN data END AS data, deleted, clock,
       created_at, updated_at
FROM ref_notes
WHERE principal = :principal AND id IN (SELECT value FROM json_each(:ids))

-- name: notes_write_many
-- note_write for many notes: :notes is a JSON array of [id, data, deleted, clock], each id
-- once, a null data keeping the note's own. The ids are materialised first so that each
-- finds its note by the primary key.
WITH w AS MATERIALIZED (
    SELECT value ->> '$[0]' AS id, value ->> '$[1]' AS data, value ->> '$[2]' AS deleted,
           value ->> '$[3]' AS clock
    FROM json_each(:notes)
)
UPDATE ref_notes
SET version = ref_notes.version + 1, data = coalesce(w.data, ref_notes.data),
    deleted = w.deleted, clock = w.clock, updated_at = :now
FROM w
WHERE ref_notes.principal = :principal AND ref_notes.id = w.id
RETURNING ref_notes.id, ref_notes.version, ref_notes.updated_at

-- name: ledger_append_many
-- ledger_append for many operations of one principal (QuerySet.run_rows): one row's
-- statement, stepped for each row in order, ?1-?7 the row's [idempotency_key,
-- operation_id, entity, method, status, version, clock], ?8 the principal, ?9 now.
INSERT INTO ref_effect_ledger (
    idempotency_key, principal, operation_id, entity, method, status, version, clock,
    applied_at
) VALUES (?1, ?8, ?2, ?3, ?4, ?5, ?6, ?7, ?9)

-- name: ledger_all
SELECT seq, idempotency_key, principal, operation_id, entity, method, status, version,
       clock, applied_at
FROM ref_effect_ledger
WHERE seq > :after
ORDER BY seq
LIMIT :limit

-- Server-resolved resources (pigeon.reference.lww, pigeon.reference.crdt) and write outcomes.

-- name: resource_get
-- FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE already holds the only write lock.
SELECT principal, collection, id, version, data, deleted, clock, raw_clock, created_at,
       updated_at
FROM ref_resources
WHERE principal = :principal AND collection = :collection AND id = :id

-- name: resource_read
SELECT principal, collection, id, version, data, deleted, clock, raw_clock, created_at,
       updated_at
FROM ref_resources
WHERE principal = :principal AND collection = :collection AND id = :id

-- name: resource_insert
-- A first write. Nothing comes back when another writer created the resource meanwhile
-- (on PostgreSQL this waits for that writer's commit): the handler then settles against
-- the row it made, instead of failing on the primary key.
INSERT INTO ref_resources (
    principal, collection, id, version, data, deleted, clock, raw_clock, created_at,
    updated_at
) VALUES (
    :principal, :collection, :id, 1, :data, :deleted, :clock, :raw_clock, :now, :now
)
ON CONFLICT (principal, collection, id) DO NOTHING
RETURNING id

-- name: resource_write
UPDATE ref_resources
SET version = version + 1, data = :data, deleted = :deleted, clock = :clock,
    raw_clock = :raw_clock, updated_at = :now
WHERE principal = :principal AND collection = :collection AND id = :id
RETURNING version

-- name: outcome_append
INSERT INTO ref_write_outcomes (
    principal, collection, id, idempotency_key, operation_id, outcome, clock, raw_clock,
    other_clock, version, payload, recorded_at
) VALUES (
    :principal, :collection, :id, :idempotency_key, :operation_id, :outcome, :clock,
    :raw_clock, :other_clock, :version, :payload, :now
)

-- name: outcome_list
SELECT seq, principal, collection, id, idempotency_key, operation_id, outcome, clock,
       raw_clock, other_clock, version, payload, recorded_at
FROM ref_write_outcomes
WHERE principal = :principal AND seq > :after
ORDER BY seq
LIMIT :limit
