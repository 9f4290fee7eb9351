-- The state row's clock becomes the floor of the queue's clock: from now on every
-- transaction that stamps an operation raises it to the stamp (pigeon.edge.stamps), and a
-- restart restores from it alone. Files written before kept it up to date only on folds,
-- purges and close(), so it starts as the greatest stamp stored (one scan, once).
UPDATE edge_state
   SET clock = max(clock, coalesce((SELECT max(clock) FROM operations), ''))
 WHERE one = 1;
