-- The reference application's tables carry its own prefix, ref_ (twin of
-- sqlite/migrations/server_0009.sql): rows, keys, indexes and identities move with them.

ALTER TABLE notes RENAME TO ref_notes;

ALTER INDEX notes_pkey RENAME TO ref_notes_pkey;

ALTER TABLE effect_ledger RENAME TO ref_effect_ledger;

ALTER INDEX effect_ledger_pkey RENAME TO ref_effect_ledger_pkey;

ALTER INDEX effect_ledger_entity RENAME TO ref_effect_ledger_entity;

ALTER TABLE resources RENAME TO ref_resources;

ALTER INDEX resources_pkey RENAME TO ref_resources_pkey;

ALTER TABLE write_outcomes RENAME TO ref_write_outcomes;

ALTER INDEX write_outcomes_pkey RENAME TO ref_write_outcomes_pkey;

ALTER INDEX write_outcomes_resource RENAME TO ref_write_outcomes_resource;
