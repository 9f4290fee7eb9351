-- The last owner token issued in this file (pigeon.edge.owners): a store that opens takes
-- the next number, so a token is never issued twice within the file. A row can only carry
-- a token that the same file counted first, so even a file restored from a backup issues
-- numbers above every token its rows carry. It replaces a random 32-hex token, whose
-- length alone cost 6-9% of the delivery cycle (it is written on every row next_batch
-- takes). A default, no rewrite: files that had no counter start from 0.
ALTER TABLE edge_state ADD COLUMN owners_issued INTEGER NOT NULL DEFAULT 0;
