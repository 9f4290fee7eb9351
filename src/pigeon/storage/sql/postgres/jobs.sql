-- Named queries of pigeon.jobs on PostgreSQL: every name of sqlite/jobs.sql with the same
-- meaning, plus a few set-based twins (``*_many``, ``job_claim_start``) that let a worker
-- claim, start and finish a whole batch in one statement each. Claims take rows with
-- FOR UPDATE SKIP LOCKED, so workers on many nodes never wait for each other's rows.

-- name: rec_insert
INSERT INTO pigeon_records (id, kind, data, status, created_at, principal)
VALUES (%(id)s, %(kind)s, %(data)s, %(status)s, %(now)s, %(principal)s)

-- name: rec_get
SELECT id, kind, data, status, created_at, completed_at, principal FROM pigeon_records
WHERE id = %(id)s

-- name: rec_complete
UPDATE pigeon_records SET status = 'completed', completed_at = %(now)s
WHERE id = %(id)s AND status <> 'completed'

-- name: rec_counts
SELECT status, count(*) AS n FROM pigeon_records GROUP BY status

-- name: obl_insert
INSERT INTO pigeon_obligations (record_id, name, job_id, status, updated_at)
VALUES (%(record_id)s, %(name)s, %(job_id)s, %(status)s, %(now)s)

-- name: obl_list
SELECT record_id, name, job_id, status, updated_at FROM pigeon_obligations
WHERE record_id = %(record_id)s ORDER BY name

-- name: rec_lock
-- Serialises the settling of one record's obligations: two finishing at once must not each
-- see the other still pending (READ COMMITTED), or the record never completes.
SELECT id FROM pigeon_records WHERE id = %(record_id)s FOR UPDATE

-- name: obl_set_status
UPDATE pigeon_obligations SET status = %(status)s, updated_at = %(now)s
WHERE record_id = %(record_id)s AND name = %(name)s

-- name: obl_open_count
SELECT count(*) AS n FROM pigeon_obligations
WHERE record_id = %(record_id)s AND status <> 'completed'

-- name: obl_counts
SELECT name, status, count(*) AS n FROM pigeon_obligations GROUP BY name, status

-- name: rec_event_insert
INSERT INTO pigeon_record_events (record_id, obligation, state, detail, at)
VALUES (%(record_id)s, %(obligation)s, %(state)s, %(detail)s, %(now)s)

-- name: rec_events
SELECT id, obligation, state, detail, at FROM pigeon_record_events
WHERE record_id = %(record_id)s ORDER BY id

-- name: job_insert
-- The statement trigger pigeon_jobs_inserted sends the queue's NOTIFY (at commit).
-- budget_start (where max_age counts from) is when the job is due: a delayed job is not
-- late before then, and counted from enqueue a delay past max_age would fail it unrun.
INSERT INTO pigeon_jobs (queue, task, payload, status, max_attempts, max_age, created_at,
                         budget_start, scheduled_at, owner, record_id, obligation, unique_key,
                         version)
VALUES (%(queue)s, %(task)s, %(payload)s, 'queued', %(max_attempts)s, %(max_age)s, %(now)s,
        %(scheduled_at)s, %(scheduled_at)s, %(owner)s, %(record_id)s, %(obligation)s,
        %(unique_key)s, %(version)s)
ON CONFLICT (unique_key) DO NOTHING
RETURNING id

-- name: job_by_unique_key
SELECT id FROM pigeon_jobs WHERE unique_key = %(unique_key)s

-- name: job_claim
-- Expired leases and ready jobs come from their own partial indexes; SKIP LOCKED passes
-- over rows another worker is claiming right now instead of queueing behind it.
-- %(versions)s (JSON {task: version}) is the newest payload version the claimer runs,
-- per task it knows (the key '' stands for any other task): a job of a newer version, or
-- of a task it does not know, is left for a worker that knows it. Cast once (known, read
-- by InitPlans), not parsed again for every candidate job.
WITH known AS MATERIALIZED (SELECT %(versions)s::jsonb AS v), expired AS (
    SELECT id, scheduled_at FROM pigeon_jobs
    WHERE queue = %(queue)s AND status = 'reserved' AND reserved_until < %(now)s
      AND version <= coalesce(((SELECT v FROM known) ->> task)::integer,
                              ((SELECT v FROM known) ->> '')::integer, 0)
    ORDER BY reserved_until
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), ready AS (
    SELECT id, scheduled_at FROM pigeon_jobs
    WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s
      AND version <= coalesce(((SELECT v FROM known) ->> task)::integer,
                              ((SELECT v FROM known) ->> '')::integer, 0)
    ORDER BY scheduled_at, id
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    -- rank: the first `start` in due order start at once (started_at set: the claiming
    -- thread runs them now); the others are claimed, not started, until job_start.
    SELECT id, row_number() OVER (ORDER BY scheduled_at, id) AS rank
    FROM (SELECT * FROM expired UNION ALL SELECT * FROM ready) AS candidates
    ORDER BY scheduled_at, id
    LIMIT %(n)s
), claimed AS (
    UPDATE pigeon_jobs AS j
    SET status = 'reserved', attempts = j.attempts + 1, lease_token = %(token)s,
        worker = %(worker)s, reserved_until = %(until)s, claimed_at = %(now)s,
        started_at = CASE WHEN picked.rank <= %(start)s THEN %(now)s::double precision END
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.queue, j.task, j.payload, j.attempts, j.max_attempts, j.attempt_base,
              j.max_age, j.created_at, j.budget_start, j.scheduled_at, j.owner, j.record_id,
              j.obligation, j.lease_token, j.last_error, j.version
)
SELECT * FROM claimed ORDER BY scheduled_at, id

-- name: job_claim_start
-- job_claim and job_attempt_start for the whole batch in one statement.
WITH known AS MATERIALIZED (SELECT %(versions)s::jsonb AS v), expired AS (
    SELECT id, scheduled_at FROM pigeon_jobs
    WHERE queue = %(queue)s AND status = 'reserved' AND reserved_until < %(now)s
      AND version <= coalesce(((SELECT v FROM known) ->> task)::integer,
                              ((SELECT v FROM known) ->> '')::integer, 0)
    ORDER BY reserved_until
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), ready AS (
    SELECT id, scheduled_at FROM pigeon_jobs
    WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s
      AND version <= coalesce(((SELECT v FROM known) ->> task)::integer,
                              ((SELECT v FROM known) ->> '')::integer, 0)
    ORDER BY scheduled_at, id
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    -- rank: the first `start` in due order start at once (started_at set: the claiming
    -- thread runs them now); the others are claimed, not started, until job_start.
    SELECT id, row_number() OVER (ORDER BY scheduled_at, id) AS rank
    FROM (SELECT * FROM expired UNION ALL SELECT * FROM ready) AS candidates
    ORDER BY scheduled_at, id
    LIMIT %(n)s
), claimed AS (
    UPDATE pigeon_jobs AS j
    SET status = 'reserved', attempts = j.attempts + 1, lease_token = %(token)s,
        worker = %(worker)s, reserved_until = %(until)s, claimed_at = %(now)s,
        started_at = CASE WHEN picked.rank <= %(start)s THEN %(now)s::double precision END
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.queue, j.task, j.payload, j.attempts, j.max_attempts, j.attempt_base,
              j.max_age, j.created_at, j.budget_start, j.scheduled_at, j.owner, j.record_id,
              j.obligation, j.lease_token, j.last_error, j.version
), started AS (
    INSERT INTO pigeon_job_attempts (job_id, attempt, worker, started_at, outcome)
    SELECT id, attempts, %(worker)s, %(now)s, 'running' FROM claimed
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET worker = excluded.worker, started_at = excluded.started_at, outcome = 'running',
        finished_at = NULL, error = NULL
)
SELECT * FROM claimed ORDER BY scheduled_at, id

-- name: job_start
-- The started marker: the attempt begins running now. Only while this lease holds the
-- job: no row, and the job must not start (it was rescued).
UPDATE pigeon_jobs SET started_at = %(now)s
WHERE id = %(id)s AND attempts = %(attempt)s AND lease_token = %(token)s
  AND status = 'reserved'

-- name: job_attempt_start
INSERT INTO pigeon_job_attempts (job_id, attempt, worker, started_at, outcome)
VALUES (%(job_id)s, %(attempt)s, %(worker)s, %(now)s, 'running')
ON CONFLICT (job_id, attempt) DO UPDATE
SET worker = excluded.worker, started_at = excluded.started_at, outcome = 'running',
    finished_at = NULL, error = NULL

-- name: job_attempt_lost
UPDATE pigeon_job_attempts SET outcome = 'lease_expired', finished_at = %(now)s
WHERE job_id = %(job_id)s AND attempt < %(attempt)s AND outcome = 'running'

-- name: job_attempt_finish
-- started_at becomes when the task began: the attempt was written at the claim, and a
-- job of a batch waits there for the jobs before it (its occupied time must not).
UPDATE pigeon_job_attempts
SET outcome = %(outcome)s, error = %(error)s, finished_at = %(now)s, started_at = %(started_at)s
WHERE job_id = %(job_id)s AND attempt = %(attempt)s

-- name: job_attempts
SELECT attempt, worker, started_at, finished_at, outcome, error FROM pigeon_job_attempts
WHERE job_id = %(job_id)s ORDER BY attempt

-- name: job_renew
UPDATE pigeon_jobs SET reserved_until = %(until)s
WHERE id = %(id)s AND attempts = %(attempt)s AND lease_token = %(token)s
  AND status = 'reserved'

-- name: job_renew_many
-- job_renew for parallel arrays of (id, attempt, token); returns the leases still held.
-- The rows are locked in ascending id order first (the subquery's FOR UPDATE sits above
-- its sort), the order every batched write follows (job_lock_many): an update joined
-- on the arrays locks rows in whatever order its plan meets them, and a finish holding
-- some of these rows while waiting for the others would deadlock with it.
UPDATE pigeon_jobs AS j SET reserved_until = %(until)s
FROM (SELECT l.id FROM pigeon_jobs AS l WHERE l.id = ANY (%(ids)s::bigint[])
      ORDER BY l.id FOR UPDATE) AS locked,
     unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(tokens)s::text[])
     AS held (id, attempt, token)
WHERE j.id = locked.id AND j.id = held.id AND j.attempts = held.attempt
  AND j.lease_token = held.token AND j.status = 'reserved'
RETURNING j.id

-- name: job_lock_many
-- The first statement of a transaction that writes several jobs (a batch's finish or
-- release): their rows locked in ascending id order, so two such transactions, or one
-- and a lease renewal, meeting the same rows queue behind each other instead of each
-- holding what the other waits for (a deadlock PostgreSQL breaks by aborting one).
SELECT id FROM pigeon_jobs WHERE id = ANY (%(ids)s::bigint[]) ORDER BY id FOR UPDATE

-- name: rec_lock_many
-- The records a transaction will settle or add events to, locked after its jobs and in
-- ascending id order. Locked up front, not one by one as their jobs come: an event's
-- foreign key takes a KEY SHARE lock on its record, and two transactions that each hold
-- one and then ask for rec_lock's FOR UPDATE deadlock even over a single record.
SELECT id FROM pigeon_records WHERE id = ANY (%(record_ids)s::text[]) ORDER BY id FOR UPDATE

-- name: job_succeed
UPDATE pigeon_jobs
SET status = 'succeeded', finished_at = %(now)s, reserved_until = NULL, last_error = NULL
WHERE id = %(id)s AND attempts = %(attempt)s AND lease_token = %(token)s
  AND status = 'reserved'

-- name: job_succeed_many
-- job_succeed and job_attempt_finish(succeeded) for parallel arrays of (id, attempt,
-- token, started: when the task began); returns the jobs whose lease was still held (the
-- others were rescued).
WITH done AS (
    UPDATE pigeon_jobs AS j
    SET status = 'succeeded', finished_at = %(now)s, reserved_until = NULL, last_error = NULL
    FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(tokens)s::text[],
                %(started)s::double precision[])
         AS held (id, attempt, token, started)
    WHERE j.id = held.id AND j.attempts = held.attempt AND j.lease_token = held.token
      AND j.status = 'reserved'
    RETURNING j.id, j.attempts, held.started
), attempts AS (
    UPDATE pigeon_job_attempts AS a
    SET outcome = 'succeeded', error = NULL, finished_at = %(now)s, started_at = done.started
    FROM done WHERE a.job_id = done.id AND a.attempt = done.attempts
)
SELECT id FROM done

-- name: job_requeue
UPDATE pigeon_jobs
SET status = 'queued', scheduled_at = %(scheduled_at)s, reserved_until = NULL,
    last_error = %(error)s, attempts = attempts - %(refund)s
WHERE id = %(id)s AND attempts = %(attempt)s AND lease_token = %(token)s
  AND status = 'reserved'

-- name: job_fail
-- scheduled_at keeps not_before (a timed-out attempt's process may still run until then):
-- a reviewed retry does not queue the job before it.
UPDATE pigeon_jobs
SET status = 'failed', finished_at = %(now)s, reserved_until = NULL, last_error = %(error)s,
    owner = %(owner)s, scheduled_at = GREATEST(scheduled_at, %(not_before)s)
WHERE id = %(id)s AND attempts = %(attempt)s AND lease_token = %(token)s
  AND status = 'reserved'

-- name: job_notify
-- Wake the idle workers of a queue (at commit) when a job becomes ready other than by
-- insert: a release or a reviewed retry.
SELECT pg_notify(pigeon_jobs_channel(%(queue)s), '')

-- name: job_get
SELECT id, queue, task, payload, status, attempts, max_attempts, attempt_base, max_age,
       created_at, budget_start, scheduled_at, reserved_until, lease_token, worker,
       claimed_at, started_at, finished_at, last_error, owner, record_id, obligation,
       unique_key, version
FROM pigeon_jobs WHERE id = %(id)s

-- name: job_list
SELECT id, queue, task, payload, status, attempts, max_attempts, attempt_base, max_age,
       created_at, budget_start, scheduled_at, reserved_until, lease_token, worker,
       claimed_at, started_at, finished_at, last_error, owner, record_id, obligation,
       unique_key, version
FROM pigeon_jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- name: job_review_retry
UPDATE pigeon_jobs
SET status = 'queued', attempt_base = attempts, budget_start = GREATEST(%(now)s, scheduled_at),
    scheduled_at = GREATEST(%(now)s, scheduled_at), reserved_until = NULL, lease_token = NULL,
    finished_at = NULL
WHERE id = %(id)s AND status = 'failed'

-- name: job_review_cancel
UPDATE pigeon_jobs
SET status = 'cancelled', finished_at = %(now)s, reserved_until = NULL, lease_token = NULL
WHERE id = %(id)s AND status IN ('failed', 'queued')

-- name: job_review_insert
INSERT INTO pigeon_job_reviews (job_id, action, reviewer, reason, at)
VALUES (%(job_id)s, %(action)s, %(reviewer)s, %(reason)s, %(now)s)

-- name: job_reviews
SELECT action, reviewer, reason, at FROM pigeon_job_reviews
WHERE job_id = %(job_id)s ORDER BY id

-- name: job_queue_stats
-- Waiting (ready) is due and not running: queued and due, or claimed but not started
-- (started_at NULL) within its lease; reserved counts the running ones. The oldest
-- waiting job is the one due first of those, a claimed one whose lease ran out included.
SELECT queue,
       count(*) FILTER (WHERE (status = 'queued' AND scheduled_at <= %(now)s)
                           OR (status = 'reserved' AND started_at IS NULL
                               AND reserved_until >= %(now)s)) AS ready,
       count(*) FILTER (WHERE status = 'queued' AND scheduled_at > %(now)s) AS delayed,
       count(*) FILTER (WHERE status = 'reserved' AND started_at IS NOT NULL
                          AND reserved_until >= %(now)s) AS reserved,
       count(*) FILTER (WHERE status = 'reserved' AND reserved_until < %(now)s) AS stuck,
       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       min(scheduled_at) FILTER (WHERE (status = 'queued' AND scheduled_at <= %(now)s)
                                    OR (status = 'reserved' AND started_at IS NULL))
           AS oldest_ready_at
FROM pigeon_jobs GROUP BY queue ORDER BY queue

-- name: job_service_times
SELECT a.finished_at - a.started_at AS seconds
FROM pigeon_job_attempts AS a JOIN pigeon_jobs AS j ON j.id = a.job_id
WHERE j.queue = %(queue)s AND a.outcome = 'succeeded' AND a.finished_at IS NOT NULL
ORDER BY a.finished_at DESC
LIMIT %(limit)s

-- name: outbox_insert
INSERT INTO pigeon_outbox (message_id, topic, payload, created_at)
VALUES (%(message_id)s, %(topic)s, %(payload)s, %(now)s)

-- name: outbox_pending
SELECT id, message_id, topic, payload, created_at, attempts FROM pigeon_outbox
WHERE published_at IS NULL ORDER BY id LIMIT %(limit)s

-- name: outbox_mark_published
UPDATE pigeon_outbox SET published_at = %(now)s, attempts = attempts + 1
WHERE id = %(id)s AND published_at IS NULL

-- name: outbox_mark_error
UPDATE pigeon_outbox SET attempts = attempts + 1, last_error = %(error)s WHERE id = %(id)s

-- name: outbox_purge
-- One bounded batch (oldest first): the relay repeats it, one short transaction each.
-- (= ANY of an array keeps the delete on the primary key; IN would hash-join the table.)
DELETE FROM pigeon_outbox WHERE id = ANY (ARRAY(
    SELECT id FROM pigeon_outbox
    WHERE published_at IS NOT NULL AND published_at < %(before)s
    ORDER BY published_at
    LIMIT %(limit)s
))

-- name: outbox_lag
-- The relay's lag: unpublished rows and the oldest one's creation time (the pending index).
SELECT count(*) AS pending, min(created_at) AS oldest FROM pigeon_outbox
WHERE published_at IS NULL

-- name: outbox_counts
SELECT count(*) FILTER (WHERE published_at IS NULL) AS pending,
       count(*) FILTER (WHERE published_at IS NOT NULL) AS published
FROM pigeon_outbox

-- name: effect_get
SELECT result FROM pigeon_effects WHERE scope = %(scope)s AND key = %(key)s

-- name: effect_claim
-- The claim comes first: a concurrent twin's insert waits on the primary key until the
-- first transaction ends, then finds the key taken (or takes it, if that one rolled back).
INSERT INTO pigeon_effects (scope, key, result, created_at)
VALUES (%(scope)s, %(key)s, 'null', %(now)s)
ON CONFLICT (scope, key) DO NOTHING
RETURNING scope

-- name: effect_set_result
UPDATE pigeon_effects SET result = %(result)s WHERE scope = %(scope)s AND key = %(key)s

-- name: provider_get
SELECT reference, provider, idempotency_key, request, status, result, attempts, created_at,
       updated_at
FROM pigeon_provider_calls WHERE reference = %(reference)s

-- name: provider_insert
INSERT INTO pigeon_provider_calls (reference, provider, idempotency_key, request, status,
                                   created_at, updated_at)
VALUES (%(reference)s, %(provider)s, %(idempotency_key)s, %(request)s, 'pending', %(now)s,
        %(now)s)

-- name: provider_attempt
UPDATE pigeon_provider_calls SET attempts = attempts + 1, updated_at = %(now)s
WHERE reference = %(reference)s

-- name: provider_settle
UPDATE pigeon_provider_calls SET status = %(status)s, result = %(result)s, updated_at = %(now)s
WHERE reference = %(reference)s

-- name: tick_claim
INSERT INTO pigeon_schedule_ticks (schedule, tick, created_at)
VALUES (%(schedule)s, %(tick)s, %(now)s)
ON CONFLICT (schedule, tick) DO NOTHING

-- name: tick_set_job
UPDATE pigeon_schedule_ticks SET job_id = %(job_id)s
WHERE schedule = %(schedule)s AND tick = %(tick)s

-- name: tick_purge
-- One bounded batch of a schedule's old ticks: the tick numbers before before_tick, at
-- most limit of them from its oldest, found through the primary key (schedule, tick).
DELETE FROM pigeon_schedule_ticks
WHERE schedule = %(schedule)s AND tick < %(before_tick)s
  AND tick < (SELECT min(tick) FROM pigeon_schedule_ticks WHERE schedule = %(schedule)s)
             + %(limit)s

-- name: tick_list
SELECT schedule, tick, job_id, created_at FROM pigeon_schedule_ticks
WHERE schedule = %(schedule)s ORDER BY tick

-- name: job_queue_pressure
-- What a worker's scaler and freshness monitor need of one queue, from the partial claim
-- indexes: the waiting backlog (each part counted up to :cap rows) and when the oldest
-- waiting job became due. Waiting: queued and due, claimed but not started (behind a
-- busy thread), or with an expired lease (claimable again). Delayed jobs and running
-- ones do not wait. LEAST skips a NULL part.
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM pigeon_jobs
            WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s
            LIMIT %(cap)s) AS r) +
       (SELECT count(*) FROM (
            SELECT 1 FROM pigeon_jobs
            WHERE queue = %(queue)s AND status = 'reserved' AND started_at IS NULL
              AND reserved_until >= %(now)s
            LIMIT %(cap)s) AS c) +
       (SELECT count(*) FROM (
            SELECT 1 FROM pigeon_jobs
            WHERE queue = %(queue)s AND status = 'reserved' AND reserved_until < %(now)s
            LIMIT %(cap)s) AS e) AS backlog,
       LEAST((SELECT min(scheduled_at) FROM pigeon_jobs
              WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s),
             (SELECT min(scheduled_at) FROM pigeon_jobs
              WHERE queue = %(queue)s AND status = 'reserved' AND started_at IS NULL))
           AS oldest_ready_at

-- name: job_failed_by_owner
SELECT owner, queue, count(*) AS n, max(finished_at) AS latest FROM pigeon_jobs
WHERE status = 'failed' GROUP BY owner, queue ORDER BY owner, queue

-- name: job_failed_recent
SELECT id, queue, task, owner, attempts, last_error, finished_at, record_id FROM pigeon_jobs
WHERE status = 'failed' ORDER BY finished_at DESC, id DESC LIMIT %(limit)s

-- name: job_purge_attempts
-- Kept in step with SQLite's three-statement purge; job_purge_finished does all three
-- here in one statement (the foreign keys are checked at its end).
DELETE FROM pigeon_job_attempts WHERE job_id = ANY (ARRAY(
    SELECT id FROM pigeon_jobs
    WHERE status IN ('succeeded', 'cancelled') AND finished_at < %(before)s
    ORDER BY finished_at, id LIMIT %(limit)s))

-- name: job_purge_reviews
DELETE FROM pigeon_job_reviews WHERE job_id = ANY (ARRAY(
    SELECT id FROM pigeon_jobs
    WHERE status IN ('succeeded', 'cancelled') AND finished_at < %(before)s
    ORDER BY finished_at, id LIMIT %(limit)s))

-- name: job_purge_finished
-- One bounded batch of retention: the oldest :limit finished jobs that no other purger
-- holds, their attempts and reviews, in one statement and one short transaction.
WITH doomed AS (
    SELECT id FROM pigeon_jobs
    WHERE status IN ('succeeded', 'cancelled') AND finished_at < %(before)s
    ORDER BY finished_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), attempts AS (
    DELETE FROM pigeon_job_attempts WHERE job_id = ANY (ARRAY(SELECT id FROM doomed))
), reviews AS (
    DELETE FROM pigeon_job_reviews WHERE job_id = ANY (ARRAY(SELECT id FROM doomed))
)
DELETE FROM pigeon_jobs WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id

-- name: breach_open
-- A breach episode begins once: the one insert that wins fires the alert.
INSERT INTO pigeon_freshness_breaches (queue, since, age, objective)
VALUES (%(queue)s, %(now)s, %(age)s, %(objective)s)
ON CONFLICT (queue) DO NOTHING
RETURNING queue

-- name: breach_close
DELETE FROM pigeon_freshness_breaches WHERE queue = %(queue)s

-- name: breach_list
SELECT queue, since, age, objective FROM pigeon_freshness_breaches ORDER BY queue

-- name: principal_revoke
INSERT INTO pigeon_revoked_principals (principal, revoked_at, reason)
VALUES (%(principal)s, %(now)s, %(reason)s)
ON CONFLICT (principal) DO UPDATE SET revoked_at = excluded.revoked_at, reason = excluded.reason

-- name: principal_restore
DELETE FROM pigeon_revoked_principals WHERE principal = %(principal)s

-- name: principal_revoked
SELECT principal, revoked_at, reason FROM pigeon_revoked_principals
WHERE principal = %(principal)s

-- name: worker_advertise
-- A worker's row in the registry (pigeon.jobs.registry), written at its start and renewed
-- while it runs: the queues it serves and the payload version of each task it runs.
INSERT INTO pigeon_workers (name, origin, queues, versions, started_at, seen_at)
VALUES (%(name)s, %(origin)s, %(queues)s, %(versions)s, %(started_at)s, %(seen_at)s)
ON CONFLICT (name) DO UPDATE SET origin = excluded.origin, queues = excluded.queues,
    versions = excluded.versions, seen_at = excluded.seen_at

-- name: worker_withdraw
DELETE FROM pigeon_workers WHERE name = %(name)s

-- name: worker_forget
DELETE FROM pigeon_workers WHERE seen_at < %(before)s

-- name: worker_list
SELECT name, origin, queues, versions, started_at, seen_at FROM pigeon_workers
WHERE seen_at >= %(since)s ORDER BY name
