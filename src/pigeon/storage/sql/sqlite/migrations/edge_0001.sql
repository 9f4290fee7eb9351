-- The edge offline queue (pigeon.edge.queue). One row per operation, kept after delivery
-- (status 'delivered') until purge_delivered() so what happened can be counted.

CREATE TABLE operations (
    seq             INTEGER PRIMARY KEY,          -- queue order (rowid: appends are cheap)
    id              TEXT    NOT NULL UNIQUE,
    idempotency_key TEXT    NOT NULL,             -- made with the row, never updated
    type            TEXT    NOT NULL,
    entity          TEXT    NOT NULL,
    endpoint        TEXT,
    method          TEXT,
    payload         TEXT    NOT NULL,             -- JSON
    created_at      REAL    NOT NULL,
    clock           TEXT    NOT NULL,             -- hybrid logical clock, sortable text
    attempts        INTEGER NOT NULL DEFAULT 0,   -- failed deliveries
    dispatches      INTEGER NOT NULL DEFAULT 0,   -- times handed to a sender and not released
    next_attempt_at REAL    NOT NULL,
    last_error      TEXT,
    base_version    TEXT,
    status          TEXT    NOT NULL
        CHECK (status IN ('pending', 'in_flight', 'delivered', 'conflict', 'dead')),
    -- 1 on the entity's earliest undelivered (pending / in_flight / conflict) operation:
    -- the only one that may be sent. Kept by the store so next_batch never has to look
    -- for an earlier operation of the same entity.
    head            INTEGER NOT NULL DEFAULT 0,
    delivered_at    REAL,
    response        TEXT,                         -- JSON of the 2xx reply, if given
    history         TEXT    NOT NULL DEFAULT '[]' -- JSON list of failed attempts
);

-- The entity's undelivered tail: coalescing looks at its end, head promotion at its start.
CREATE INDEX operations_live ON operations (entity, seq)
    WHERE status IN ('pending', 'in_flight', 'conflict');

-- Heads in queue order: next_batch walks the pending ones; stats count the rest.
CREATE INDEX operations_heads ON operations (status, seq, next_attempt_at)
    WHERE head = 1;

-- Heads waiting out a backoff: the scheduler's timer. Fresh operations are always due and
-- never enter this index, so enqueue does not pay for it.
CREATE INDEX operations_backoff ON operations (next_attempt_at)
    WHERE head = 1 AND status = 'pending' AND attempts > 0;

CREATE INDEX operations_delivered ON operations (delivered_at) WHERE status = 'delivered';

CREATE INDEX operations_dead ON operations (seq) WHERE status = 'dead';

-- One row: the node id of this queue's clock, the greatest clock stamp issued (restored on
-- open so a restart never issues a smaller one), the pause reason, coalescing savings.
CREATE TABLE edge_state (
    one        INTEGER PRIMARY KEY CHECK (one = 1),
    node_id    TEXT    NOT NULL,
    clock      TEXT    NOT NULL DEFAULT '',
    paused     TEXT,
    coalesced  INTEGER NOT NULL DEFAULT 0
);

-- Versions of entities this client has seen from the server (If-Match for its writes).
CREATE TABLE base_versions (
    entity  TEXT PRIMARY KEY,
    version TEXT NOT NULL
) WITHOUT ROWID;
