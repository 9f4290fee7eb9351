-- Which open queue holds each in-flight operation: the token of its owner file
-- (pigeon.edge.owners), written when next_batch marks it in flight. A queue that finds an
-- owner gone puts that owner's operations back to pending while other queues stay open;
-- until now that waited for an opener alone with the file. Other statuses may keep a
-- stale value: only in-flight rows are read. NULL (every row written before this
-- migration, or by a queue with no owner file) is recovered as before, by a lone opener.
-- No default and no index: adding the column rewrites nothing, and enqueue never sets it.
ALTER TABLE operations ADD COLUMN owner TEXT;
