-- The effect ledger's (entity, seq) index goes: no statement reads the ledger by entity
-- (it is read in seq order, ledger_all), and every applied operation paid for it: a third
-- of its ledger row's insert on PostgreSQL, more on SQLite when entities come unordered
-- (tests/storage/test_pg_indexes.py holds every index to a statement that reads it).
DROP INDEX IF EXISTS ref_effect_ledger_entity;
