-- Named queries of pigeon.jobs (records, jobs, failed store, outbox, effects, providers,
-- schedules). The PostgreSQL twin defines the same names with %(name)s parameters.

-- name: rec_insert
INSERT INTO pigeon_records (id, kind, data, status, created_at, principal)
VALUES (:id, :kind, :data, :status, :now, :principal)

-- name: rec_get
SELECT id, kind, data, status, created_at, completed_at, principal FROM pigeon_records
WHERE id = :id

-- name: rec_complete
UPDATE pigeon_records SET status = 'completed', completed_at = :now
WHERE id = :id AND status <> 'completed'

-- name: rec_counts
SELECT status, count(*) AS n FROM pigeon_records GROUP BY status

-- name: obl_insert
INSERT INTO pigeon_obligations (record_id, name, job_id, status, updated_at)
VALUES (:record_id, :name, :job_id, :status, :now)

-- name: obl_list
SELECT record_id, name, job_id, status, updated_at FROM pigeon_obligations
WHERE record_id = :record_id ORDER BY name

-- name: rec_lock
-- Serialises the settling of one record's obligations: two finishing at once must not each
-- see the other still pending (READ COMMITTED), or the record never completes.
SELECT id FROM pigeon_records WHERE id = :record_id

-- name: obl_set_status
UPDATE pigeon_obligations SET status = :status, updated_at = :now
WHERE record_id = :record_id AND name = :name

-- name: obl_open_count
SELECT count(*) AS n FROM pigeon_obligations
WHERE record_id = :record_id AND status <> 'completed'

-- name: obl_counts
SELECT name, status, count(*) AS n FROM pigeon_obligations GROUP BY name, status

-- name: rec_event_insert
INSERT INTO pigeon_record_events (record_id, obligation, state, detail, at)
VALUES (:record_id, :obligation, :state, :detail, :now)

-- name: rec_events
SELECT id, obligation, state, detail, at FROM pigeon_record_events
WHERE record_id = :record_id ORDER BY id

-- name: job_insert
-- budget_start (where max_age counts from) is when the job is due: a delayed job is not
-- late before then, and counted from enqueue a delay past max_age would fail it unrun.
INSERT INTO pigeon_jobs (queue, task, payload, status, max_attempts, max_age, created_at,
                         budget_start, scheduled_at, owner, record_id, obligation, unique_key,
                         version)
VALUES (:queue, :task, :payload, 'queued', :max_attempts, :max_age, :now, :scheduled_at,
        :scheduled_at, :owner, :record_id, :obligation, :unique_key, :version)
ON CONFLICT (unique_key) DO NOTHING
RETURNING id

-- name: job_by_unique_key
SELECT id FROM pigeon_jobs WHERE unique_key = :unique_key

-- name: job_claim
-- Claimed, not started (started_at NULL: the job still waits) until job_start marks it.
-- :versions (JSON {task: version}) is the newest payload version the claimer runs, per
-- task it knows (the key '' stands for any other task): a job of a newer version, or of
-- a task it does not know, is left for a worker that knows it. Read once into a few rows
-- (MATERIALIZED), not parsed again for every candidate job. The ready jobs are read in
-- due order from their index and the read stops at :n eligible ones, however long the
-- backlog; the expired leases (few) are sorted; the first :n of both are taken.
WITH known AS MATERIALIZED (SELECT key AS task, value AS version FROM json_each(:versions)),
fallback AS MATERIALIZED (SELECT coalesce((SELECT version FROM known WHERE task = ''), 0) AS v)
UPDATE pigeon_jobs
SET status = 'reserved', attempts = attempts + 1, lease_token = :token, worker = :worker,
    reserved_until = :until, claimed_at = :now, started_at = NULL
WHERE id IN (
    SELECT id FROM (
        SELECT * FROM (
            SELECT id, scheduled_at FROM pigeon_jobs AS j
            WHERE queue = :queue AND status = 'queued' AND scheduled_at <= :now
              AND version <= coalesce((SELECT k.version FROM known AS k WHERE k.task = j.task),
                                      (SELECT v FROM fallback))
            ORDER BY scheduled_at, id
            LIMIT :n
        )
        UNION ALL
        SELECT * FROM (
            SELECT id, scheduled_at FROM pigeon_jobs AS j
            WHERE queue = :queue AND status = 'reserved' AND reserved_until < :now
              AND version <= coalesce((SELECT k.version FROM known AS k WHERE k.task = j.task),
                                      (SELECT v FROM fallback))
            ORDER BY scheduled_at, id
            LIMIT :n
        )
    )
    ORDER BY scheduled_at, id
    LIMIT :n
)
RETURNING id, queue, task, payload, attempts, max_attempts, attempt_base, max_age, created_at,
          budget_start, scheduled_at, owner, record_id, obligation, lease_token, last_error,
          version

-- name: job_start
-- The started marker: the attempt begins running now. Only while this lease holds the
-- job: no row, and the job must not start (it was rescued).
UPDATE pigeon_jobs SET started_at = :now
WHERE id = :id AND attempts = :attempt AND lease_token = :token AND status = 'reserved'

-- name: job_attempt_start
INSERT INTO pigeon_job_attempts (job_id, attempt, worker, started_at, outcome)
VALUES (:job_id, :attempt, :worker, :now, 'running')
ON CONFLICT (job_id, attempt) DO UPDATE
SET worker = excluded.worker, started_at = excluded.started_at, outcome = 'running',
    finished_at = NULL, error = NULL

-- name: job_attempt_lost
UPDATE pigeon_job_attempts SET outcome = 'lease_expired', finished_at = :now
WHERE job_id = :job_id AND attempt < :attempt AND outcome = 'running'

-- name: job_attempt_finish
-- started_at becomes when the task began: the attempt was written at the claim, and a
-- job of a batch waits there for the jobs before it (its occupied time must not).
UPDATE pigeon_job_attempts
SET outcome = :outcome, error = :error, finished_at = :now, started_at = :started_at
WHERE job_id = :job_id AND attempt = :attempt

-- name: job_attempts
SELECT attempt, worker, started_at, finished_at, outcome, error FROM pigeon_job_attempts
WHERE job_id = :job_id ORDER BY attempt

-- name: job_renew
UPDATE pigeon_jobs SET reserved_until = :until
WHERE id = :id AND attempts = :attempt AND lease_token = :token AND status = 'reserved'

-- name: job_succeed
UPDATE pigeon_jobs
SET status = 'succeeded', finished_at = :now, reserved_until = NULL, last_error = NULL
WHERE id = :id AND attempts = :attempt AND lease_token = :token AND status = 'reserved'

-- name: job_requeue
UPDATE pigeon_jobs
SET status = 'queued', scheduled_at = :scheduled_at, reserved_until = NULL,
    last_error = :error, attempts = attempts - :refund
WHERE id = :id AND attempts = :attempt AND lease_token = :token AND status = 'reserved'

-- name: job_fail
-- scheduled_at keeps not_before (a timed-out attempt's process may still run until then):
-- a reviewed retry does not queue the job before it.
UPDATE pigeon_jobs
SET status = 'failed', finished_at = :now, reserved_until = NULL, last_error = :error,
    owner = :owner, scheduled_at = max(scheduled_at, :not_before)
WHERE id = :id AND attempts = :attempt AND lease_token = :token AND status = 'reserved'

-- name: job_get
SELECT id, queue, task, payload, status, attempts, max_attempts, attempt_base, max_age, created_at,
       budget_start, scheduled_at, reserved_until, lease_token, worker, claimed_at,
       started_at, finished_at, last_error, owner, record_id, obligation, unique_key, version
FROM pigeon_jobs WHERE id = :id

-- name: job_list
SELECT id, queue, task, payload, status, attempts, max_attempts, attempt_base, max_age, created_at,
       budget_start, scheduled_at, reserved_until, lease_token, worker, claimed_at,
       started_at, finished_at, last_error, owner, record_id, obligation, unique_key, version
FROM pigeon_jobs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit

-- name: job_review_retry
UPDATE pigeon_jobs
SET status = 'queued', attempt_base = attempts, budget_start = max(:now, scheduled_at),
    scheduled_at = max(:now, scheduled_at), reserved_until = NULL, lease_token = NULL,
    finished_at = NULL
WHERE id = :id AND status = 'failed'

-- name: job_review_cancel
UPDATE pigeon_jobs
SET status = 'cancelled', finished_at = :now, reserved_until = NULL, lease_token = NULL
WHERE id = :id AND status IN ('failed', 'queued')

-- name: job_review_insert
INSERT INTO pigeon_job_reviews (job_id, action, reviewer, reason, at)
VALUES (:job_id, :action, :reviewer, :reason, :now)

-- name: job_reviews
SELECT action, reviewer, reason, at FROM pigeon_job_reviews WHERE job_id = :job_id ORDER BY id

-- name: job_queue_stats
-- Waiting (ready) is due and not running: queued and due, or claimed but not started
-- (started_at NULL) within its lease; reserved counts the running ones. The oldest
-- waiting job is the one due first of those, a claimed one whose lease ran out included.
SELECT queue,
       sum(CASE WHEN (status = 'queued' AND scheduled_at <= :now)
                  OR (status = 'reserved' AND started_at IS NULL AND reserved_until >= :now)
                THEN 1 ELSE 0 END) AS ready,
       sum(CASE WHEN status = 'queued' AND scheduled_at > :now THEN 1 ELSE 0 END) AS delayed,
       sum(CASE WHEN status = 'reserved' AND started_at IS NOT NULL AND reserved_until >= :now
                THEN 1 ELSE 0 END) AS reserved,
       sum(CASE WHEN status = 'reserved' AND reserved_until < :now THEN 1 ELSE 0 END) AS stuck,
       sum(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) AS succeeded,
       sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed,
       sum(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
       min(CASE WHEN (status = 'queued' AND scheduled_at <= :now)
                  OR (status = 'reserved' AND started_at IS NULL)
                THEN scheduled_at END) AS oldest_ready_at
FROM pigeon_jobs GROUP BY queue ORDER BY queue

-- name: job_service_times
SELECT a.finished_at - a.started_at AS seconds
FROM pigeon_job_attempts AS a JOIN pigeon_jobs AS j ON j.id = a.job_id
WHERE j.queue = :queue AND a.outcome = 'succeeded' AND a.finished_at IS NOT NULL
ORDER BY a.finished_at DESC
LIMIT :limit

-- name: outbox_insert
INSERT INTO pigeon_outbox (message_id, topic, payload, created_at)
VALUES (:message_id, :topic, :payload, :now)

-- name: outbox_pending
SELECT id, message_id, topic, payload, created_at, attempts FROM pigeon_outbox
WHERE published_at IS NULL ORDER BY id LIMIT :limit

-- name: outbox_mark_published
UPDATE pigeon_outbox SET published_at = :now, attempts = attempts + 1
WHERE id = :id AND published_at IS NULL

-- name: outbox_mark_error
UPDATE pigeon_outbox SET attempts = attempts + 1, last_error = :error WHERE id = :id

-- name: outbox_purge
DELETE FROM pigeon_outbox WHERE published_at IS NOT NULL AND published_at < :before

-- name: outbox_lag
-- The relay's lag: unpublished rows and the oldest one's creation time (the pending index).
SELECT count(*) AS pending, min(created_at) AS oldest FROM pigeon_outbox
WHERE published_at IS NULL

-- name: outbox_counts
SELECT sum(CASE WHEN published_at IS NULL THEN 1 ELSE 0 END) AS pending,
       sum(CASE WHEN published_at IS NOT NULL THEN 1 ELSE 0 END) AS published
FROM pigeon_outbox

-- name: effect_get
SELECT result FROM pigeon_effects WHERE scope = :scope AND key = :key

-- name: effect_claim
-- The claim comes first: a concurrent twin waits on the key (the write lock here, the
-- primary key on PostgreSQL) and then finds the claim taken, never runs the mutation.
INSERT INTO pigeon_effects (scope, key, result, created_at) VALUES (:scope, :key, 'null', :now)
ON CONFLICT (scope, key) DO NOTHING
RETURNING scope

-- name: effect_set_result
UPDATE pigeon_effects SET result = :result WHERE scope = :scope AND key = :key

-- name: provider_get
SELECT reference, provider, idempotency_key, request, status, result, attempts, created_at,
       updated_at
FROM pigeon_provider_calls WHERE reference = :reference

-- name: provider_insert
INSERT INTO pigeon_provider_calls (reference, provider, idempotency_key, request, status,
                                   created_at, updated_at)
VALUES (:reference, :provider, :idempotency_key, :request, 'pending', :now, :now)

-- name: provider_attempt
UPDATE pigeon_provider_calls SET attempts = attempts + 1, updated_at = :now
WHERE reference = :reference

-- name: provider_settle
UPDATE pigeon_provider_calls SET status = :status, result = :result, updated_at = :now
WHERE reference = :reference

-- name: tick_claim
INSERT INTO pigeon_schedule_ticks (schedule, tick, created_at) VALUES (:schedule, :tick, :now)
ON CONFLICT (schedule, tick) DO NOTHING

-- name: tick_set_job
UPDATE pigeon_schedule_ticks SET job_id = :job_id WHERE schedule = :schedule AND tick = :tick

-- name: tick_purge
-- One bounded batch of a schedule's old ticks: the tick numbers before before_tick, at
-- most limit of them from its oldest, found through the primary key (schedule, tick).
DELETE FROM pigeon_schedule_ticks
WHERE schedule = :schedule AND tick < :before_tick
  AND tick < (SELECT min(tick) FROM pigeon_schedule_ticks WHERE schedule = :schedule)
             + :limit

-- name: tick_list
SELECT schedule, tick, job_id, created_at FROM pigeon_schedule_ticks
WHERE schedule = :schedule ORDER BY tick

-- name: job_queue_pressure
-- What a worker's scaler and freshness monitor need of one queue, from the claim indexes:
-- the waiting backlog (each part counted up to :cap, so a huge backlog costs no more than
-- :cap rows) and when the oldest waiting job became due. Waiting: queued and due, claimed
-- but not started (behind a busy thread), or with an expired lease (claimable again).
-- Delayed jobs and running ones do not wait.
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM pigeon_jobs
            WHERE queue = :queue AND status = 'queued' AND scheduled_at <= :now
            LIMIT :cap)) +
       (SELECT count(*) FROM (
            SELECT 1 FROM pigeon_jobs
            WHERE queue = :queue AND status = 'reserved' AND started_at IS NULL
              AND reserved_until >= :now
            LIMIT :cap)) +
       (SELECT count(*) FROM (
            SELECT 1 FROM pigeon_jobs
            WHERE queue = :queue AND status = 'reserved' AND reserved_until < :now
            LIMIT :cap)) AS backlog,
       -- min() of two values is NULL if either is: the aggregate skips a NULL part.
       (SELECT min(at) FROM (
            SELECT min(scheduled_at) AS at FROM pigeon_jobs
            WHERE queue = :queue AND status = 'queued' AND scheduled_at <= :now
            UNION ALL
            SELECT min(scheduled_at) FROM pigeon_jobs
            WHERE queue = :queue AND status = 'reserved' AND started_at IS NULL))
           AS oldest_ready_at

-- name: job_failed_by_owner
SELECT owner, queue, count(*) AS n, max(finished_at) AS latest FROM pigeon_jobs
WHERE status = 'failed' GROUP BY owner, queue ORDER BY owner, queue

-- name: job_failed_recent
SELECT id, queue, task, owner, attempts, last_error, finished_at, record_id FROM pigeon_jobs
WHERE status = 'failed' ORDER BY finished_at DESC, id DESC LIMIT :limit

-- name: job_purge_attempts
-- Retention, one bounded batch in one transaction: attempts and reviews of the batch's
-- jobs first (foreign keys), then the jobs. Under the write lock the three statements see
-- the same oldest :limit finished jobs.
DELETE FROM pigeon_job_attempts WHERE job_id IN (
    SELECT id FROM pigeon_jobs
    WHERE status IN ('succeeded', 'cancelled') AND finished_at < :before
    ORDER BY finished_at, id LIMIT :limit)

-- name: job_purge_reviews
DELETE FROM pigeon_job_reviews WHERE job_id IN (
    SELECT id FROM pigeon_jobs
    WHERE status IN ('succeeded', 'cancelled') AND finished_at < :before
    ORDER BY finished_at, id LIMIT :limit)

-- name: job_purge_finished
DELETE FROM pigeon_jobs WHERE id IN (
    SELECT id FROM pigeon_jobs
    WHERE status IN ('succeeded', 'cancelled') AND finished_at < :before
    ORDER BY finished_at, id LIMIT :limit)

-- name: breach_open
-- A breach episode begins once: the one insert that wins fires the alert.
INSERT INTO pigeon_freshness_breaches (queue, since, age, objective)
VALUES (:queue, :now, :age, :objective)
ON CONFLICT (queue) DO NOTHING
RETURNING queue

-- name: breach_close
DELETE FROM pigeon_freshness_breaches WHERE queue = :queue

-- name: breach_list
SELECT queue, since, age, objective FROM pigeon_freshness_breaches ORDER BY queue

-- name: principal_revoke
INSERT INTO pigeon_revoked_principals (principal, revoked_at, reason)
VALUES (:principal, :now, :reason)
ON CONFLICT (principal) DO UPDATE SET revoked_at = excluded.revoked_at, reason = excluded.reason

-- name: principal_restore
DELETE FROM pigeon_revoked_principals WHERE principal = :principal

-- name: principal_revoked
SELECT principal, revoked_at, reason FROM pigeon_revoked_principals WHERE principal = :principal

-- name: worker_advertise
-- A worker's row in the registry (pigeon.jobs.registry), written at its start and renewed
-- while it runs: the queues it serves and the payload version of each task it runs.
INSERT INTO pigeon_workers (name, origin, queues, versions, started_at, seen_at)
VALUES (:name, :origin, :queues, :versions, :started_at, :seen_at)
ON CONFLICT (name) DO UPDATE SET origin = excluded.origin, queues = excluded.queues,
    versions = excluded.versions, seen_at = excluded.seen_at

-- name: worker_withdraw
DELETE FROM pigeon_workers WHERE name = :name

-- name: worker_forget
DELETE FROM pigeon_workers WHERE seen_at < :before

-- name: worker_list
SELECT name, origin, queues, versions, started_at, seen_at FROM pigeon_workers
WHERE seen_at >= :since ORDER BY name
