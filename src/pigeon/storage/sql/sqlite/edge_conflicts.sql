-- Named queries of the edge's conflict records (pigeon.edge.conflicts). SQLite.

-- name: snapshot_get
SELECT entity, version, data, updated_at FROM entity_snapshots WHERE entity = :entity;

-- name: snapshot_put
INSERT INTO entity_snapshots (entity, version, data, updated_at)
VALUES (:entity, :version, :data, :now)
ON CONFLICT (entity) DO UPDATE
   SET version = excluded.version, data = excluded.data, updated_at = excluded.updated_at;

-- name: conflict_insert
INSERT INTO conflicts (
    entity, op_id, idempotency_key, op_type, strategy, outcome, base, local, remote,
    remote_version, result, resolution, new_op_id, detail, created_at, resolved_at
) VALUES (
    :entity, :op_id, :idempotency_key, :op_type, :strategy, :outcome, :base, :local,
    :remote, :remote_version, :result, :resolution, :new_op_id, :detail, :now,
    CASE WHEN :outcome = 'held' THEN NULL ELSE :now END
);

-- name: conflict_get
SELECT * FROM conflicts WHERE id = :id;

-- name: conflict_list
SELECT * FROM conflicts
 WHERE (:outcome IS NULL OR outcome = :outcome) ORDER BY id LIMIT :n;

-- name: conflict_held_for
SELECT * FROM conflicts WHERE entity = :entity AND outcome = 'held' ORDER BY id;

-- name: conflict_resolve
UPDATE conflicts
   SET outcome = 'resolved', resolution = :resolution, result = :result,
       new_op_id = :new_op_id, resolved_at = :now
 WHERE id = :id AND outcome = 'held';

-- name: entity_tail
-- The entity's live operations, oldest first: the conflicted head and what waits behind it.
SELECT * FROM operations
 WHERE entity = :entity
   AND status <> 'delivered' AND status <> 'dead'
 ORDER BY seq;
