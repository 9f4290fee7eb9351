-- Conflict resolution on the edge (pigeon.edge.conflicts).

-- The last state of each entity this client saw from the server: the "base" of a
-- three-way merge (what both sides started from) and its version.
CREATE TABLE entity_snapshots (
    entity     TEXT PRIMARY KEY,
    version    TEXT,
    data       TEXT NOT NULL,                -- JSON
    updated_at REAL NOT NULL
) WITHOUT ROWID;

-- One row per conflict and per operation a resolution superseded; never deleted, so no
-- edit leaves the device without a record of what became of it. ``outcome``: 'held' (a
-- conflicted copy waiting for the user), 'merged', 'won' (local kept), 'lost' (remote
-- kept; the local edit is here), 'resolved' (by the user: see ``resolution``),
-- 'superseded' (a later operation of the entity folded into a resolution).
CREATE TABLE conflicts (
    id              INTEGER PRIMARY KEY,
    entity          TEXT NOT NULL,
    op_id           TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    op_type         TEXT NOT NULL,
    strategy        TEXT NOT NULL,
    outcome         TEXT NOT NULL
        CHECK (outcome IN ('held', 'merged', 'won', 'lost', 'resolved', 'superseded')),
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

CREATE INDEX conflicts_open ON conflicts (entity) WHERE outcome = 'held';
