-- Writing an operation's status cost three throwaway b-trees a row. SQLite reads an IN
-- list of more than two constants through a temporary table, and in a CHECK constraint
-- or a partial index's WHERE it fills one again for every row it writes (the status
-- check, and the queued index for the row before and after): a third of what sending a
-- batch and marking it delivered cost the queue. Comparisons cost no table: the check
-- names each status, and the queued index is "not delivered" (the other four, by the
-- check). Its queries say the same, which SQLite needs to choose the index.

-- SQLite changes no constraint in place: the table is made again with it, its rows
-- copied (seq, the rowid, with them) and its indexes made again.
CREATE TABLE operations_next (
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
        CHECK (status = 'pending' OR status = 'in_flight' OR status = 'delivered'
               OR status = 'conflict' OR status = 'dead'),
    -- 1 on the entity's earliest queued operation (dead ones included: a dead letter
    -- holds its entity's later operations): the only one that may be sent.
    head            INTEGER NOT NULL DEFAULT 0,
    delivered_at    REAL,
    response        TEXT,                         -- JSON of the 2xx reply, if given
    history         TEXT    NOT NULL DEFAULT '[]', -- JSON list of failed attempts
    owner           TEXT                          -- the queue that took it in flight
);

INSERT INTO operations_next (
    seq, id, idempotency_key, type, entity, endpoint, method, payload, created_at, clock,
    attempts, dispatches, next_attempt_at, last_error, base_version, status, head,
    delivered_at, response, history, owner
)
SELECT seq, id, idempotency_key, type, entity, endpoint, method, payload, created_at, clock,
       attempts, dispatches, next_attempt_at, last_error, base_version, status, head,
       delivered_at, response, history, owner
  FROM operations;

DROP TABLE operations;

ALTER TABLE operations_next RENAME TO operations;

-- Heads in queue order: next_batch walks the pending ones; stats count the rest.
CREATE INDEX operations_heads ON operations (status, seq, next_attempt_at)
    WHERE head = 1;

-- Heads waiting out a backoff: the scheduler's timer (edge_0002).
CREATE INDEX operations_backoff ON operations (next_attempt_at)
    WHERE head = 1 AND status = 'pending' AND (attempts > 0 OR dispatches > 0);

CREATE INDEX operations_delivered ON operations (delivered_at) WHERE status = 'delivered';

CREATE INDEX operations_dead ON operations (seq) WHERE status = 'dead';

-- The entity's queued operations (live or dead), for the tail an enqueue looks at and
-- the head a move promotes (edge_0007).
CREATE INDEX operations_queued ON operations (entity, seq) WHERE status <> 'delivered';

-- The conflicts' outcome check, made again the same way (a row per conflict, its
-- outcome written again when the user resolves it).
CREATE TABLE conflicts_next (
    id              INTEGER PRIMARY KEY,
    entity          TEXT NOT NULL,
    op_id           TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    op_type         TEXT NOT NULL,
    strategy        TEXT NOT NULL,
    outcome         TEXT NOT NULL
        CHECK (outcome = 'held' OR outcome = 'merged' OR outcome = 'won' OR outcome = 'lost'
               OR outcome = 'resolved' OR outcome = 'superseded'),
    base            TEXT,                    -- JSON: the entity as last seen, if known
    local           TEXT,                    -- JSON: what this device wanted
    remote          TEXT,                    -- JSON: what the server held
    remote_version  TEXT,
    result          TEXT,                    -- JSON: what was sent (or kept) instead
    resolution      TEXT,                    -- local / remote / both / merged (by the user)
    new_op_id       TEXT,                    -- the operation that carries the result
    detail          TEXT,
    created_at      REAL NOT NULL,
    resolved_at     REAL
);

INSERT INTO conflicts_next (
    id, entity, op_id, idempotency_key, op_type, strategy, outcome, base, local, remote,
    remote_version, result, resolution, new_op_id, detail, created_at, resolved_at
)
SELECT id, entity, op_id, idempotency_key, op_type, strategy, outcome, base, local, remote,
       remote_version, result, resolution, new_op_id, detail, created_at, resolved_at
  FROM conflicts;

DROP TABLE conflicts;

ALTER TABLE conflicts_next RENAME TO conflicts;

CREATE INDEX conflicts_open ON conflicts (entity) WHERE outcome = 'held';
