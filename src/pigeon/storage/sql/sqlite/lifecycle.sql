-- Named queries of the lifecycle event counts (pigeon/lifecycle.py), SQLite; the
-- twin file of the other backend has the same names with the same meaning.

-- name: lifecycle_count
-- One more event of a kind: its count grows by one, its last time and place are this one.
INSERT INTO pigeon_lifecycle_events (kind, count, last_at, last_detail)
VALUES (:kind, 1, :now, :detail)
ON CONFLICT (kind) DO UPDATE SET
    count = pigeon_lifecycle_events.count + 1,
    last_at = excluded.last_at,
    last_detail = excluded.last_detail
