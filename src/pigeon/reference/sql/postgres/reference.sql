-- The reference application's named queries (pigeon.reference.schema runs them through the
-- transaction's own SQL, never through the server's query set): notes and the effect ledger,
-- then the server-resolved resources and their write outcomes.

-- The reference notes application (pigeon.reference.notes) and its effect ledger: the same
-- names and meaning as in ../sqlite/reference.sql.

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

-- name: note_create_logged
-- note_create and, when it creates, the write's ledger row, in one statement: one round
-- trip where SQLite (no writes in a WITH) runs note_create and ledger_append.
WITH created AS (
    INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
    VALUES (%(principal)s, %(id)s, 1, %(data)s, 0, %(clock)s, %(now)s, %(now)s)
    ON CONFLICT (principal, id) DO UPDATE
    SET version = ref_notes.version + 1, data = excluded.data, deleted = 0,
        clock = excluded.clock, updated_at = excluded.updated_at
    WHERE ref_notes.deleted = 1
    RETURNING principal, id, version, data, deleted, clock, created_at, updated_at
), logged AS (
    INSERT INTO ref_effect_ledger (
        idempotency_key, principal, operation_id, entity, method, status, version, clock,
        applied_at
    )
    SELECT %(idempotency_key)s, principal, %(operation_id)s, %(entity)s, %(method)s,
           %(status)s, version, %(clock)s, %(now)s
    FROM created
)
SELECT principal, id, version, data, deleted, clock, created_at, updated_at FROM created

-- name: note_write
UPDATE ref_notes
SET version = version + 1, data = coalesce(%(data)s, data), deleted = %(deleted)s,
    clock = %(clock)s, updated_at = %(now)s
WHERE principal = %(principal)s AND id = %(id)s
RETURNING principal, id, version, data, deleted, clock, created_at, updated_at

-- name: note_write_logged
-- The checks and the write of an existing note, and its ledger row, in one statement: one
-- round trip where SQLite runs note_lock, note_write and ledger_append. The note is locked
-- as note_lock locks it and, if live and :if_match (a version, '*' or NULL) allows it,
-- written with :data, or its own sealed data where :data is NULL (a delete keeps it).
-- The row comes back with written = 1, or the current note with written = 0 (the 412's),
-- or nothing (no live note: 404).
WITH current AS (
    SELECT principal, id, version, data, deleted, clock, created_at, updated_at
    FROM ref_notes
    WHERE principal = %(principal)s AND id = %(id)s
    FOR UPDATE
), live AS (
    SELECT * FROM current WHERE deleted = 0
), written AS (
    UPDATE ref_notes AS n
    SET version = n.version + 1, data = coalesce(%(data)s, n.data), deleted = %(deleted)s,
        clock = %(clock)s, updated_at = %(now)s
    FROM live AS c
    WHERE n.principal = c.principal AND n.id = c.id
      AND (%(if_match)s::text IS NULL OR %(if_match)s::text IN ('*', c.version::text))
    RETURNING n.principal, n.id, n.version, n.data, n.deleted, n.clock, n.created_at,
              n.updated_at
), logged AS (
    INSERT INTO ref_effect_ledger (
        idempotency_key, principal, operation_id, entity, method, status, version, clock,
        applied_at
    )
    SELECT %(idempotency_key)s, principal, %(operation_id)s, %(entity)s, %(method)s,
           %(status)s, version, %(clock)s, %(now)s
    FROM written
)
SELECT 1 AS written, principal, id, version, data, deleted, clock, created_at, updated_at
FROM written
UNION ALL
SELECT 0, principal, id, version, data, deleted, clock, created_at, updated_at
FROM live
WHERE NOT EXISTS (SELECT FROM written)

-- name: ledger_append
INSERT INTO ref_effect_ledger (
    idempotency_key, principal, operation_id, entity, method, status, version, clock,
    applied_at
) VALUES (
    %(idempotency_key)s, %(principal)s, %(operation_id)s, %(entity)s, %(method)s,
    %(status)s, %(version)s, %(clock)s, %(now)s
)

-- name: notes_create_many
-- note_create for many notes at once (pigeon.reference.notes_many): :notes is a JSON array
-- of [id, data, clock], each id once. The ids that come back were created; the others
-- have a row, live or deleted, and create_note answers them one by one (409 with the live
-- note, a deleted note's new life). SQLite's block takes a deleted note's new life in the
-- same statement, by ON CONFLICT DO UPDATE: here, its speculative insertion cost two
-- fifths of the statement for every note, to spare a rare one its own request. A note another
-- transaction creates meanwhile fails the INSERT (23505), and the batch runs one operation
-- at a time. OFFSET 0: one lookup of the primary key per note, never an anti-join that
-- reads a principal's every note (tests/storage/test_pg_indexes.py).
INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
SELECT %(principal)s, n.v ->> 0, 1, n.v ->> 1, 0, n.v ->> 2, %(now)s, %(now)s
FROM jsonb_array_elements(%(notes)s::jsonb) AS n(v)
WHERE NOT EXISTS (
    SELECT FROM ref_notes AS had
    WHERE had.principal = %(principal)s AND had.id = n.v ->> 0
    OFFSET 0
)
RETURNING id, version, updated_at

-- name: notes_lock_many
-- note_lock for a JSON array of ids (:ids): the rows locked until the commit. The data
-- comes back only with :with_data (a patch merges into it; a replace or a delete does not
-- read it). The ids go to the primary key as one array (= ANY): a principal's every note
-- is not read to find a few, with or without statistics, nor by a plan made while the
-- table was empty (tests/storage/test_pg_indexes.py holds it to all three).
SELECT principal, id, version, CASE WHEN %(with_data)s THEN data END AS data, deleted, clock,
       created_at, updated_at
FROM ref_notes
WHERE principal = %(principal)s
  AND id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)))
ORDER BY id
FOR UPDATE

-- name: notes_write_many
-- note_write for many notes: :notes is a JSON array of [id, data, deleted, clock], each id
-- once, a null data keeping the note's own. Materialised, the ids given to the primary
-- key as one array, as in notes_lock_many.
WITH w AS MATERIALIZED (
    SELECT v ->> 0 AS id, v ->> 1 AS data, (v ->> 2)::integer AS deleted, v ->> 3 AS clock
    FROM jsonb_array_elements(%(notes)s::jsonb) AS v
)
UPDATE ref_notes AS n
SET version = n.version + 1, data = coalesce(w.data, n.data), deleted = w.deleted,
    clock = w.clock, updated_at = %(now)s
FROM w
WHERE n.principal = %(principal)s AND n.id = ANY (ARRAY(SELECT id FROM w)) AND n.id = w.id
RETURNING n.id, n.version, n.updated_at

-- name: ledger_append_many
-- ledger_append for many operations of one principal (QuerySet.run_rows), in the order
-- of %(rows)s, a JSON array of [idempotency_key, operation_id, entity, method, status,
-- version, clock].
INSERT INTO ref_effect_ledger (
    idempotency_key, principal, operation_id, entity, method, status, version, clock,
    applied_at
)
SELECT e.v ->> 0, %(principal)s, e.v ->> 1, e.v ->> 2, e.v ->> 3, (e.v ->> 4)::integer,
       (e.v ->> 5)::integer, e.v ->> 6, %(now)s
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e(v, n)
ORDER BY e.n

-- name: ledger_all
SELECT seq, idempotency_key, principal, operation_id, entity, method, status, version,
       clock, applied_at
FROM ref_effect_ledger
WHERE seq > %(after)s
ORDER BY seq
LIMIT %(limit)s

-- Server-resolved resources and write outcomes: the same names and meaning as in
-- ../sqlite/reference.sql.

-- name: resource_get
-- Locked: two writers of one resource on two intake processes decide one after the other.
SELECT principal, collection, id, version, data, deleted, clock, raw_clock, created_at,
       updated_at
FROM ref_resources
WHERE principal = %(principal)s AND collection = %(collection)s AND id = %(id)s
FOR UPDATE

-- name: resource_read
SELECT principal, collection, id, version, data, deleted, clock, raw_clock, created_at,
       updated_at
FROM ref_resources
WHERE principal = %(principal)s AND collection = %(collection)s AND id = %(id)s

-- name: resource_insert
-- A first write. Nothing comes back when another writer created the resource meanwhile
-- (on PostgreSQL this waits for that writer's commit): the handler then settles against
-- the row it made, instead of failing on the primary key.
INSERT INTO ref_resources (
    principal, collection, id, version, data, deleted, clock, raw_clock, created_at,
    updated_at
) VALUES (
    %(principal)s, %(collection)s, %(id)s, 1, %(data)s, %(deleted)s, %(clock)s, %(raw_clock)s, %(now)s, %(now)s
)
ON CONFLICT (principal, collection, id) DO NOTHING
RETURNING id

-- name: resource_write
UPDATE ref_resources
SET version = version + 1, data = %(data)s, deleted = %(deleted)s, clock = %(clock)s,
    raw_clock = %(raw_clock)s, updated_at = %(now)s
WHERE principal = %(principal)s AND collection = %(collection)s AND id = %(id)s
RETURNING version

-- name: outcome_append
INSERT INTO ref_write_outcomes (
    principal, collection, id, idempotency_key, operation_id, outcome, clock, raw_clock,
    other_clock, version, payload, recorded_at
) VALUES (
    %(principal)s, %(collection)s, %(id)s, %(idempotency_key)s, %(operation_id)s, %(outcome)s, %(clock)s,
    %(raw_clock)s, %(other_clock)s, %(version)s, %(payload)s, %(now)s
)

-- name: outcome_list
SELECT seq, principal, collection, id, idempotency_key, operation_id, outcome, clock,
       raw_clock, other_clock, version, payload, recorded_at
FROM ref_write_outcomes
WHERE principal = %(principal)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s
