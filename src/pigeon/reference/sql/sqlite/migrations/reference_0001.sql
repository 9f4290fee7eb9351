-- The reference application's tables, its own schema component (pigeon.reference.schema):
-- versioned notes and their effect ledger (pigeon.reference.notes), and the resources whose
-- conflicts the server settles with the record of every settled write (pigeon.reference.lww,
-- pigeon.reference.crdt). Timestamps are float epoch seconds.
--
-- IF NOT EXISTS throughout: a database made before the reference app had a component of
-- its own has these tables already, made by the server's migrations (server_0001, _0003,
-- renamed by _0009); they are adopted as they are, rows and all.

-- Notes are scoped by principal like the keys that write them. Deleted notes stay as
-- tombstones so the version keeps rising if the same id is created again.
CREATE TABLE IF NOT EXISTS ref_notes (
    principal  TEXT NOT NULL,
    id         TEXT NOT NULL,
    version    INTEGER NOT NULL,
    data       TEXT NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0,
    clock      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (principal, id)
);

-- One row per applied operation. Deliberately no unique constraint on the key: a double
-- effect must show up here as two rows, not be hidden by a constraint error.
CREATE TABLE IF NOT EXISTS ref_effect_ledger (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL,
    principal       TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    entity          TEXT NOT NULL,
    method          TEXT NOT NULL,
    status          INTEGER NOT NULL,
    version         INTEGER,
    clock           TEXT NOT NULL,
    applied_at      REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS ref_effect_ledger_entity ON ref_effect_ledger (entity, seq);

-- One row per resource of a server-resolved collection ('lww-notes': last write wins by
-- hybrid logical clock; 'docs': CRDT state). ``clock`` is the effective stamp of the write
-- that holds the resource (the device's stamp corrected for its measured clock offset),
-- ``raw_clock`` the stamp the device sent. Deleted resources stay as tombstones: a late,
-- older write must still find the delete that beat it.
CREATE TABLE IF NOT EXISTS ref_resources (
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
CREATE TABLE IF NOT EXISTS ref_write_outcomes (
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

CREATE INDEX IF NOT EXISTS ref_write_outcomes_resource
    ON ref_write_outcomes (principal, collection, id, seq);
