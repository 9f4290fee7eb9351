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
