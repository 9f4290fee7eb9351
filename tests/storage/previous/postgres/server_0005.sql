-- Who made each record (twin of sqlite/migrations/server_0005.sql): the records route
-- shows a record to that principal and to operators, nobody else. Records written before
-- this (or outside the intake) have none and are the operators' alone.

ALTER TABLE pigeon_records ADD COLUMN principal text;
