-- A head released after 409 "key in progress" waits out the server's Retry-After without
-- spending an attempt (attempts = 0, dispatches > 0). It is not "fresh" (due when made,
-- in seq order), so the scheduler's timer must find it with the backed-off heads.
DROP INDEX operations_backoff;

CREATE INDEX operations_backoff ON operations (next_attempt_at)
    WHERE head = 1 AND status = 'pending' AND (attempts > 0 OR dispatches > 0);
