-- pigeon: upgrade only
-- The reference application's tables carry its own prefix, ref_, and belong to its own
-- schema component (pigeon/reference/sql), which makes them in a new database. A database
-- made before the split has them from this component's earlier migrations: there they are
-- renamed (rows and all) and the reference component, when it is attached, finds them and
-- adopts them. ALTER TABLE IF EXISTS is PostgreSQL's spelling, which pigeon's SQLite
-- migrator honours (pigeon.storage.schema): a new database has none of these tables.
-- SQLite renames no index: the old two go, the reference component makes the new ones.

ALTER TABLE IF EXISTS notes RENAME TO ref_notes;

ALTER TABLE IF EXISTS effect_ledger RENAME TO ref_effect_ledger;

ALTER TABLE IF EXISTS resources RENAME TO ref_resources;

ALTER TABLE IF EXISTS write_outcomes RENAME TO ref_write_outcomes;

DROP INDEX IF EXISTS effect_ledger_entity;

DROP INDEX IF EXISTS write_outcomes_resource;
