-- The outcome check named three outcomes in an IN list, which SQLite reads through a
-- temporary b-tree that, in a CHECK constraint, it fills again for every row it writes
-- (a settled write each). The same outcomes as comparisons cost no table. SQLite changes
-- no constraint in place: the table is made again, its rows copied (seq with them) and
-- its AUTOINCREMENT counter carried over, so no seq is ever given twice.
CREATE TABLE ref_write_outcomes_next (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    principal       TEXT NOT NULL,
    collection      TEXT NOT NULL,
    id              TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    outcome         TEXT NOT NULL
        CHECK (outcome = 'won' OR outcome = 'lost' OR outcome = 'merged'),
    clock           TEXT NOT NULL,
    raw_clock       TEXT NOT NULL,
    other_clock     TEXT,
    version         INTEGER NOT NULL,
    payload         TEXT NOT NULL,
    recorded_at     REAL NOT NULL
);

INSERT INTO ref_write_outcomes_next (
    seq, principal, collection, id, idempotency_key, operation_id, outcome, clock,
    raw_clock, other_clock, version, payload, recorded_at
)
SELECT seq, principal, collection, id, idempotency_key, operation_id, outcome, clock,
       raw_clock, other_clock, version, payload, recorded_at
  FROM ref_write_outcomes;

DELETE FROM sqlite_sequence WHERE name = 'ref_write_outcomes_next';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'ref_write_outcomes_next', seq FROM sqlite_sequence WHERE name = 'ref_write_outcomes';

DROP TABLE ref_write_outcomes;

ALTER TABLE ref_write_outcomes_next RENAME TO ref_write_outcomes;

CREATE INDEX ref_write_outcomes_resource ON ref_write_outcomes (principal, collection, id, seq);
