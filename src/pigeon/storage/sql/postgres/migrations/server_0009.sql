-- pigeon: upgrade only
-- The reference application's tables carry its own prefix, ref_, and belong to its own
-- schema component (pigeon/reference/sql), which makes them in a new database (twin of
-- sqlite/migrations/server_0009.sql). A database made before the split has them from this
-- component's earlier migrations: rows, keys, indexes and identities move to the new names
-- here, and the reference component adopts them when it is attached. A new database has
-- none of them: every statement is IF EXISTS.

ALTER TABLE IF EXISTS notes RENAME TO ref_notes;

ALTER INDEX IF EXISTS notes_pkey RENAME TO ref_notes_pkey;

ALTER TABLE IF EXISTS effect_ledger RENAME TO ref_effect_ledger;

ALTER INDEX IF EXISTS effect_ledger_pkey RENAME TO ref_effect_ledger_pkey;

ALTER INDEX IF EXISTS effect_ledger_entity RENAME TO ref_effect_ledger_entity;

ALTER TABLE IF EXISTS resources RENAME TO ref_resources;

ALTER INDEX IF EXISTS resources_pkey RENAME TO ref_resources_pkey;

ALTER TABLE IF EXISTS write_outcomes RENAME TO ref_write_outcomes;

ALTER INDEX IF EXISTS write_outcomes_pkey RENAME TO ref_write_outcomes_pkey;

ALTER INDEX IF EXISTS write_outcomes_resource RENAME TO ref_write_outcomes_resource;
