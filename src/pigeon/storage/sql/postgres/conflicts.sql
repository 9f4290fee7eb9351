-- Server-resolved resources and write outcomes: the same names and meaning as
-- sqlite/conflicts.sql.

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
