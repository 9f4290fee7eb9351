-- Conflict resolution on the server (pigeon.reference.lww, pigeon.reference.crdt): resources
-- whose conflicts the server settles itself, and the record of every settled write.

-- One row per resource of a server-resolved collection ('lww-notes': last write wins by
-- hybrid logical clock; 'docs': CRDT state). ``clock`` is the effective stamp of the write
-- that holds the resource (the device's stamp corrected for its measured clock offset),
-- ``raw_clock`` the stamp the device sent. Deleted resources stay as tombstones: a late,
-- older write must still find the delete that beat it.
CREATE TABLE resources (
    principal  TEXT NOT NULL,
    collection TEXT NOT NULL,
    id         TEXT NOT NULL,
    version    INTEGER NOT NULL,
    data       TEXT NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0,
    clock      TEXT NOT NULL,
    raw_clock  TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (principal, collection, id)
);

-- Every write that met an existing value: 'won' (it replaced it), 'lost' (acknowledged,
-- not applied: the value of a greater clock stays), 'merged' (CRDT update folded in).
-- The losing payload is kept: a user's edit is never dropped without a record.
CREATE TABLE write_outcomes (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    principal       TEXT NOT NULL,
    collection      TEXT NOT NULL,
    id              TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    outcome         TEXT NOT NULL CHECK (outcome IN ('won', 'lost', 'merged')),
    clock           TEXT NOT NULL,
    raw_clock       TEXT NOT NULL,
    other_clock     TEXT,
    version         INTEGER NOT NULL,
    payload         TEXT NOT NULL,
    recorded_at     REAL NOT NULL
);

CREATE INDEX write_outcomes_resource ON write_outcomes (principal, collection, id, seq);
