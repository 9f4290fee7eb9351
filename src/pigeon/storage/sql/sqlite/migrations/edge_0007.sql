-- A dead operation keeps its place in its entity's order (docs/design.md, "Order": a failing
-- operation blocks its own entity's tail): it stays the entity's head, so the operations
-- made after it are held until it is retried (in its own place) or discarded.

-- The entity's queued operations (live or dead), for the tail an enqueue looks at and
-- the head a move promotes; it replaces operations_live, which left the dead out.
DROP INDEX IF EXISTS operations_live;

CREATE INDEX IF NOT EXISTS operations_queued ON operations (entity, seq)
    WHERE status IN ('pending', 'in_flight', 'conflict', 'dead');

-- Files written before: a dead letter gave up its head, and the next operation of its
-- entity became the head. Where that head is still pending (never sent since it took
-- over, or sent and failed: either way the server has not applied it), it is held again
-- behind the earliest dead one. An entity whose live head is in flight or conflict-held
-- keeps it: that one may be on the server already; the dead ones before it become the
-- head again once it leaves the queue (promote_head counts them).
UPDATE operations SET head = 0
 WHERE head = 1 AND status = 'pending'
   AND EXISTS (SELECT 1 FROM operations AS d
                WHERE d.entity = operations.entity AND d.status = 'dead'
                  AND d.seq < operations.seq);

UPDATE operations SET head = 1
 WHERE status = 'dead' AND head = 0
   AND NOT EXISTS (SELECT 1 FROM operations AS e
                    WHERE e.entity = operations.entity
                      AND e.status IN ('pending', 'in_flight', 'conflict', 'dead')
                      AND (e.seq < operations.seq OR e.head = 1));
