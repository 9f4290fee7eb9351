-- The reference application's tables carry its own prefix, ref_: notes, effect_ledger,
-- resources and write_outcomes were unprefixed, and could collide with an application's
-- own tables written through Tx.sql. Their rows move with them; SQLite renames no index,
-- so the two are made again under their new names.

ALTER TABLE notes RENAME TO ref_notes;

ALTER TABLE effect_ledger RENAME TO ref_effect_ledger;

ALTER TABLE resources RENAME TO ref_resources;

ALTER TABLE write_outcomes RENAME TO ref_write_outcomes;

DROP INDEX effect_ledger_entity;

CREATE INDEX ref_effect_ledger_entity ON ref_effect_ledger (entity, seq);

DROP INDEX write_outcomes_resource;

CREATE INDEX ref_write_outcomes_resource
    ON ref_write_outcomes (principal, collection, id, seq);
