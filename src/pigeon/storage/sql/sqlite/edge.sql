-- Named queries of the edge offline queue (pigeon.edge.sqlite). SQLite, :name parameters.
-- "live" = pending, in_flight or conflict: undelivered and not dead.
-- "queued" = live or dead: every operation that still holds its place in its entity's
-- order. The head of an entity is its earliest queued operation, so a dead head blocks
-- (holds) the entity's later operations until it is retried or discarded, as a
-- conflict-held one does. Queries of the live ones name all four statuses and leave out
-- 'dead' with a second term: then they read the partial index operations_queued.

-- name: init_state
INSERT OR IGNORE INTO edge_state (one, node_id) VALUES (1, :node_id);

-- name: get_state
SELECT node_id, clock, paused, coalesced FROM edge_state WHERE one = 1;

-- name: get_clock
-- The floor of the queue's clock: no stamp stored in the file is greater (pigeon.edge.sqlite.stamps).
SELECT clock FROM edge_state WHERE one = 1;

-- name: bump_state
-- In every transaction that stamps: the greatest stamp it issued, and the sends coalescing
-- saved.
UPDATE edge_state
   SET clock = max(clock, :clock), coalesced = coalesced + :coalesced
 WHERE one = 1;

-- name: issue_owner
-- The next owner token of this file (pigeon.edge.owners), in a short write transaction of
-- its own when a store opens: above every number issued before and above :floor (the
-- greatest number already naming a file in the owners' folder). Run after init_state: a
-- new file has no state row until then.
UPDATE edge_state SET owners_issued = max(owners_issued, :floor) + 1
 WHERE one = 1
RETURNING owners_issued;

-- name: set_paused
UPDATE edge_state SET paused = :paused WHERE one = 1;

-- name: queued_tail
-- The entity's latest queued operation: what an enqueue may fold into (if never sent: a
-- dead one never folds) and, when there is none, the sign that the new one is the head.
SELECT * FROM operations
 WHERE entity = :entity AND status <> 'delivered'
 ORDER BY seq DESC LIMIT 1;

-- name: insert_op
INSERT INTO operations (
    id, idempotency_key, type, entity, endpoint, method, payload, created_at, clock,
    next_attempt_at, base_version, status, head
) VALUES (
    :id, :idempotency_key, :type, :entity, :endpoint, :method, :payload, :created_at, :clock,
    :created_at, :base_version, 'pending', :head
);

-- name: insert_head
-- One new operation on an entity with no live operation, so its head; positional, for
-- executemany over a group commit's run of them (pigeon.edge.sqlite.append.insert_heads):
-- id, idempotency_key, type, entity, endpoint, method, payload, created_at, clock,
-- next_attempt_at, base_version.
INSERT INTO operations (
    id, idempotency_key, type, entity, endpoint, method, payload, created_at, clock,
    next_attempt_at, base_version, status, head
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', 1);

-- name: last_seq
-- The seq of the last row this connection inserted (executemany reports none).
SELECT last_insert_rowid();

-- name: queued_entities
-- Which of these entities (a JSON array) have a queued operation (a new one is no head).
SELECT DISTINCT entity FROM operations
 WHERE entity IN (SELECT value FROM json_each(:entities))
   AND status <> 'delivered';

-- name: bulk_insert_op
-- Benchmarks and imports: operations on distinct entities, each its entity's head.
INSERT INTO operations (
    id, idempotency_key, type, entity, endpoint, method, payload, created_at, clock,
    next_attempt_at, status, head
) VALUES (
    :id, :idempotency_key, :type, :entity, :endpoint, :method, :payload, :created_at, :clock,
    :created_at, 'pending', 1
);

-- name: fold_op
UPDATE operations
   SET type = :type, payload = :payload, endpoint = :endpoint, method = :method,
       clock = :clock
 WHERE seq = :seq;

-- name: delete_op
DELETE FROM operations WHERE seq = :seq;

-- name: promote_head
-- The entity's earliest queued operation becomes its head (no-op if it already is).
UPDATE operations SET head = 1
 WHERE seq = (SELECT seq FROM operations
               WHERE entity = :entity AND status <> 'delivered'
               ORDER BY seq LIMIT 1)
   AND head = 0;

-- name: get_op
SELECT *, (head = 0 AND status = 'pending' AND EXISTS (
           SELECT 1 FROM operations AS d
            WHERE d.entity = operations.entity AND d.head = 1 AND d.status = 'dead')) AS held
  FROM operations WHERE id = :id;

-- name: op_id_by_seq
-- The CLI takes the seq it lists (`pigeon queue show 12`) as well as the id.
SELECT id FROM operations WHERE seq = :seq;

-- name: dispatch_due
-- The oldest due heads, at most :n, marked in flight and returned: one statement. :owner
-- is the token of the queue that takes them (NULL if it has none): while that queue lives
-- no other recovers them (pigeon.edge.owners). A short number (issue_owner): written on
-- every row taken, a 32-character token cost 6-9% of the delivery cycle.
UPDATE operations SET status = 'in_flight', dispatches = dispatches + 1, owner = :owner
 WHERE seq IN (SELECT seq FROM operations
                WHERE head = 1 AND status = 'pending' AND next_attempt_at <= :now
                ORDER BY seq LIMIT :n)
RETURNING *;

-- name: deliver
-- In flight, or pending after a restart or release while the server may have it.
-- ``promote``: the entity's next live operation, when it is not yet its head (then the
-- caller runs set_head); NULL when there is nothing to promote, the usual case, which
-- then costs no second statement.
UPDATE operations
   SET status = 'delivered', head = 0, delivered_at = :now, response = :response
 WHERE id = :id
   AND (status = 'in_flight' OR (status = 'pending' AND dispatches > 0))
RETURNING entity,
    -- The entity by :id, not by a reference to the updated row: with the latter SQLite
    -- scans the table instead of using operations_queued.
    (SELECT CASE WHEN next.head = 0 THEN next.seq END FROM operations AS next
      WHERE next.entity = (SELECT entity FROM operations WHERE id = :id)
        AND next.status <> 'delivered'
        AND next.id <> :id
      ORDER BY next.seq LIMIT 1) AS promote;

-- name: set_head
UPDATE operations SET head = 1 WHERE seq = :seq;

-- name: deliver_all
-- deliver, for a whole reply in one statement. :items is a JSON list of [id, response
-- JSON text or null]; each id is found through its index (json_each drives the join).
-- The caller reads the states first (delivery_states) and passes only the ids this
-- UPDATE will move, so it knows which etags to keep without a RETURNING.
UPDATE operations
   SET status = 'delivered', head = 0, delivered_at = :now, response = d.response
  FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS response
          FROM json_each(:items)) AS d
 WHERE operations.id = d.id
   AND (operations.status = 'in_flight'
        OR (operations.status = 'pending' AND operations.dispatches > 0));

-- name: deliver_all_values
-- deliver_all with :items a JSON list of [id, response], each response the JSON value
-- itself, stored as its JSON text (none for null): encoded once, not as text in a string.
UPDATE operations
   SET status = 'delivered', head = 0, delivered_at = :now, response = d.response
  FROM (SELECT value ->> '$[0]' AS id, NULLIF(value -> '$[1]', 'null') AS response
          FROM json_each(:items)) AS d
 WHERE operations.id = d.id
   AND (operations.status = 'in_flight'
        OR (operations.status = 'pending' AND operations.dispatches > 0));

-- name: deliver_sealed
-- deliver_all for sealed responses, stepped once per row by executemany (positional:
-- now, response, id): a sealed value is bytes, which no JSON list carries.
UPDATE operations
   SET status = 'delivered', head = 0, delivered_at = ?, response = ?
 WHERE id = ?
   AND (status = 'in_flight' OR (status = 'pending' AND dispatches > 0));

-- name: delivery_states
SELECT id, entity, status, dispatches FROM operations WHERE id IN (SELECT value FROM json_each(:ids));

-- name: promote_heads
-- promote_head for every entity of the JSON list :entities, in one statement.
UPDATE operations SET head = 1
 WHERE seq IN (SELECT (SELECT seq FROM operations AS o
                        WHERE o.entity = e.value
                          AND o.status <> 'delivered'
                        ORDER BY o.seq LIMIT 1)
                 FROM json_each(:entities) AS e)
   AND head = 0;

-- name: reschedule
UPDATE operations
   SET status = 'pending', attempts = :attempts, next_attempt_at = :next_attempt_at,
       last_error = :last_error, history = :history
 WHERE seq = :seq;

-- name: bury
-- It stays its entity's head (only heads are ever in flight): the entity's later
-- operations are held behind it until it is retried or discarded.
UPDATE operations
   SET status = 'dead', attempts = :attempts, last_error = :last_error,
       history = :history
 WHERE seq = :seq;

-- name: hold_conflict
UPDATE operations
   SET status = 'conflict', attempts = :attempts, last_error = :last_error,
       history = :history
 WHERE seq = :seq;

-- name: release
-- :unsent is 1 when the operation never reached the server (it may be folded into again
-- if no earlier dispatch reached it either), 0 when the server holds its key (409).
UPDATE operations
   SET status = 'pending', dispatches = max(dispatches - :unsent, 0), next_attempt_at = :at
 WHERE seq = :seq;

-- name: unhold_conflict
UPDATE operations SET status = 'pending', next_attempt_at = :now WHERE seq = :seq;

-- name: resurrect
-- A retried dead letter goes back in its own place (seq and head unchanged): nothing of
-- its entity made after it was sent meanwhile, they were held behind it.
UPDATE operations
   SET status = 'pending', attempts = 0, next_attempt_at = :now
 WHERE seq = :seq;

-- name: tail_behind
-- The live operations waiting behind the head :seq (none when :seq is no head), in order.
SELECT o.* FROM operations AS d
  JOIN operations AS o
    ON o.entity = d.entity AND o.seq > d.seq
   AND o.status <> 'delivered' AND o.status <> 'dead'
 WHERE d.seq = :seq AND d.head = 1
 ORDER BY o.seq;

-- name: recover_in_flight
-- After a crash, by an opener alone with the file: whatever was in flight is sent again,
-- same key, attempts unchanged. Only heads are ever in flight: ``head = 1`` lets the open
-- read operations_heads' in-flight range instead of scanning every row (delivered ones
-- are kept for a week: a scan of them on every open grew with the history).
UPDATE operations SET status = 'pending', next_attempt_at = :now
 WHERE head = 1 AND status = 'in_flight';

-- name: in_flight_owners
-- The queues other than :me (NULL: none) that have operations in flight. Only heads are
-- ever in flight, so this reads operations_heads' in-flight range, not the table: cheap
-- enough for a running queue to ask every few seconds.
SELECT DISTINCT owner FROM operations
 WHERE head = 1 AND status = 'in_flight' AND owner IS NOT NULL AND owner IS NOT :me;

-- name: recover_owner
-- recover_in_flight for the operations of one queue that is gone (pigeon.edge.owners).
UPDATE operations SET status = 'pending', next_attempt_at = :now
 WHERE head = 1 AND status = 'in_flight' AND owner = :owner;

-- name: pending_ops
-- ``held``: 1 on an operation waiting behind its entity's dead head (get_op and list_ops
-- say it too).
SELECT *, (head = 0 AND status = 'pending' AND EXISTS (
           SELECT 1 FROM operations AS d
            WHERE d.entity = operations.entity AND d.head = 1 AND d.status = 'dead')) AS held
  FROM operations
 WHERE status <> 'delivered' AND status <> 'dead'
 ORDER BY seq;

-- name: dead_ops
SELECT * FROM operations WHERE status = 'dead' ORDER BY seq;

-- name: list_ops
SELECT *, (head = 0 AND status = 'pending' AND EXISTS (
           SELECT 1 FROM operations AS d
            WHERE d.entity = operations.entity AND d.head = 1 AND d.status = 'dead')) AS held
  FROM operations
 WHERE status = :status OR :status IS NULL
 ORDER BY seq LIMIT :n;

-- name: count_live
SELECT count(*) AS n FROM operations
 WHERE status <> 'delivered' AND status <> 'dead';

-- name: count_dead
SELECT count(*) AS n FROM operations WHERE status = 'dead';

-- name: count_delivered
SELECT count(*) AS n FROM operations WHERE status = 'delivered';

-- name: count_heads
SELECT count(*) AS n FROM operations WHERE head = 1 AND status = :status;

-- name: count_blocked
-- Entities whose head is dead, conflict-held or backing off.
SELECT count(*) AS n FROM operations
 WHERE head = 1
   AND (status IN ('dead', 'conflict') OR (status = 'pending' AND attempts > 0));

-- name: count_held
-- Operations held behind their entity's dead head: the dead heads (operations_dead), then
-- each one's entity through operations_queued.
SELECT count(*) AS n FROM operations AS d
  JOIN operations AS o
    ON o.entity = d.entity
   AND o.status <> 'delivered' AND o.status <> 'dead'
 WHERE d.status = 'dead' AND d.head = 1;

-- name: oldest_head
-- The smallest created_at of the live heads, not the first head by seq: a device clock
-- that went back makes later operations look older. Reads the heads only, through operations_heads (one
-- index range per status), never the delivered rows kept for a week.
SELECT min(created_at) AS created_at FROM operations
 WHERE head = 1 AND status IN ('pending', 'in_flight', 'conflict');

-- name: next_backoff
-- Heads that were sent before (failed, or released after 409) wait until their time.
SELECT next_attempt_at AS at FROM operations INDEXED BY operations_backoff
 WHERE head = 1 AND status = 'pending' AND (attempts > 0 OR dispatches > 0)
 ORDER BY next_attempt_at LIMIT 1;

-- name: first_fresh
-- Never-sent heads are due from the moment they were made (or released unsent).
SELECT next_attempt_at AS at FROM operations
 WHERE head = 1 AND status = 'pending' AND attempts = 0 AND dispatches = 0
 ORDER BY seq LIMIT 1;

-- name: purge_delivered
-- The oldest :limit operations delivered before :before (through operations_delivered).
DELETE FROM operations
 WHERE seq IN (SELECT seq FROM operations
                WHERE status = 'delivered' AND delivered_at < :before
                ORDER BY delivered_at, seq LIMIT :limit);

-- name: get_base_version
SELECT version FROM base_versions WHERE entity = :entity;

-- name: set_base_version
INSERT INTO base_versions (entity, version) VALUES (:entity, :version)
ON CONFLICT (entity) DO UPDATE SET version = excluded.version;

-- name: clear_base_version
DELETE FROM base_versions WHERE entity = :entity;
