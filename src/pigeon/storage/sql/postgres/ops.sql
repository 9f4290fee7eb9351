-- Named queries of the operations page (pigeon/ops/queries.py), PostgreSQL. The "row"
-- queries (rows_*) select one row per thing counted: queries.py counts them, capped on a
-- large table (the capped count reads at most cap+1 index entries) and estimated by the
-- planner (EXPLAIN) past the cap.

-- name: table_size
SELECT reltuples::bigint AS n FROM pg_class WHERE oid = to_regclass(%(table)s)

-- name: rows_records_received
SELECT 1 FROM pigeon_records WHERE created_at >= %(since)s AND created_at < %(until)s

-- name: rows_records_completed
SELECT 1 FROM pigeon_records
WHERE created_at >= %(since)s AND created_at < %(until)s AND status = 'completed'

-- name: rows_jobs_ready
-- Waiting: queued and due, or claimed but not started (behind a busy thread) within its
-- lease (jobs.sql job_queue_stats counts the same).
SELECT 1 FROM pigeon_jobs
WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s
UNION ALL
SELECT 1 FROM pigeon_jobs
WHERE queue = %(queue)s AND status = 'reserved' AND started_at IS NULL
  AND reserved_until >= %(now)s

-- name: rows_jobs_delayed
SELECT 1 FROM pigeon_jobs
WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at > %(now)s

-- name: rows_jobs_reserved
-- Running: claimed and started, within the lease.
SELECT 1 FROM pigeon_jobs
WHERE queue = %(queue)s AND status = 'reserved' AND reserved_until >= %(now)s
  AND started_at IS NOT NULL

-- name: rows_jobs_stuck
SELECT 1 FROM pigeon_jobs
WHERE queue = %(queue)s AND status = 'reserved' AND reserved_until < %(now)s

-- name: rows_jobs_failed
SELECT 1 FROM pigeon_jobs WHERE status = 'failed' AND queue = %(queue)s

-- name: rows_jobs_succeeded
SELECT 1 FROM pigeon_jobs WHERE queue = %(queue)s AND status = 'succeeded'

-- name: rows_jobs_cancelled
SELECT 1 FROM pigeon_jobs WHERE queue = %(queue)s AND status = 'cancelled'

-- name: rows_obligations
SELECT 1 FROM pigeon_obligations WHERE name = %(name)s AND status = %(status)s

-- name: rows_obligations_running
-- In progress: its job runs (claimed and not started, it still waits).
SELECT 1 FROM pigeon_jobs
WHERE status = 'reserved' AND obligation = %(name)s AND obligation IS NOT NULL
  AND started_at IS NOT NULL

-- name: rows_obligations_live_jobs
SELECT 1 FROM pigeon_jobs
WHERE obligation = %(name)s AND obligation IS NOT NULL AND status IN ('queued', 'reserved')

-- name: queues_seen
-- Distinct queues by a skip scan of pigeon_jobs_queue: one index probe per queue.
WITH RECURSIVE q AS (
    SELECT (SELECT queue FROM pigeon_jobs ORDER BY queue LIMIT 1) AS queue
    UNION ALL
    SELECT (SELECT j.queue FROM pigeon_jobs AS j WHERE j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL
)
SELECT queue FROM q WHERE queue IS NOT NULL

-- name: obligation_kinds
WITH RECURSIVE k AS (
    SELECT (SELECT name FROM pigeon_obligations ORDER BY name LIMIT 1) AS name
    UNION ALL
    SELECT (SELECT o.name FROM pigeon_obligations AS o WHERE o.name > k.name
            ORDER BY o.name LIMIT 1)
    FROM k WHERE k.name IS NOT NULL
)
SELECT name FROM k WHERE name IS NOT NULL

-- name: oldest_ready
-- The oldest waiting job: queued and due, or claimed but not started (jobs.sql
-- job_queue_pressure reads the same). LEAST skips a NULL part.
SELECT LEAST((SELECT min(scheduled_at) FROM pigeon_jobs
              WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s),
             (SELECT min(scheduled_at) FROM pigeon_jobs
              WHERE queue = %(queue)s AND status = 'reserved' AND started_at IS NULL)) AS at

-- name: oldest_owed
-- Accepted when its record was (records.accept enqueues in the same transaction).
SELECT min(created_at) AS at FROM pigeon_jobs
WHERE obligation = %(name)s AND obligation IS NOT NULL
  AND (status = 'queued' OR status = 'reserved' OR status = 'failed')

-- name: attempts_per_minute
-- The last hour's finished attempts by queue, minute and outcome (both partial indexes on
-- finished_at), with the durations' sum and histogram buckets (le_0 .. le_12, the bounds
-- of queries.DURATION_BUCKETS) of the successful ones.
SELECT j.queue, a.outcome = 'succeeded' AS ok, floor((a.finished_at - %(since)s) / 60) AS minute, count(*) AS n,
       sum(CASE WHEN a.outcome = 'succeeded' THEN a.finished_at - a.started_at ELSE 0 END)
           AS seconds,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.005 THEN 1 ELSE 0 END) AS le_0,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.01 THEN 1 ELSE 0 END) AS le_1,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.025 THEN 1 ELSE 0 END) AS le_2,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.05 THEN 1 ELSE 0 END) AS le_3,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.1 THEN 1 ELSE 0 END) AS le_4,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.25 THEN 1 ELSE 0 END) AS le_5,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 0.5 THEN 1 ELSE 0 END) AS le_6,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 1 THEN 1 ELSE 0 END) AS le_7,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 2.5 THEN 1 ELSE 0 END) AS le_8,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 5 THEN 1 ELSE 0 END) AS le_9,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 10 THEN 1 ELSE 0 END) AS le_10,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 30 THEN 1 ELSE 0 END) AS le_11,
       sum(CASE WHEN a.outcome = 'succeeded' AND a.finished_at - a.started_at <= 60 THEN 1 ELSE 0 END) AS le_12
FROM (SELECT job_id, outcome, started_at, finished_at FROM pigeon_job_attempts
      WHERE outcome = 'succeeded' AND finished_at >= %(since)s
      UNION ALL
      SELECT job_id, outcome, started_at, finished_at FROM pigeon_job_attempts
      WHERE outcome <> 'succeeded' AND finished_at >= %(since)s) AS a
JOIN pigeon_jobs AS j ON j.id = a.job_id
GROUP BY 1, 2, 3

-- name: durations_sample
-- The latest successful attempts of a queue in the last hour, for its percentiles.
SELECT a.finished_at - a.started_at AS seconds
FROM pigeon_job_attempts AS a JOIN pigeon_jobs AS j ON j.id = a.job_id
WHERE a.outcome = 'succeeded' AND a.finished_at >= %(since)s AND j.queue = %(queue)s
ORDER BY a.finished_at DESC
LIMIT %(limit)s

-- name: failed_counts
SELECT coalesce(owner, '-') AS owner, queue, count(*) AS n FROM pigeon_jobs
WHERE status = 'failed' GROUP BY 1, 2

-- name: failed_rows
-- The latest failed jobs; queries.py groups them by error class (error_class()).
SELECT id, coalesce(owner, '-') AS owner, queue, task, attempts, last_error, finished_at,
       record_id, obligation
FROM pigeon_jobs WHERE status = 'failed'
ORDER BY finished_at DESC, id DESC LIMIT %(limit)s

-- name: failed_select
-- The jobs an action may apply to: failed, of the owner and queue chosen (None: any),
-- none newer than the dry run saw (max_id); actions.py filters the error class.
SELECT id, last_error FROM pigeon_jobs
WHERE status = 'failed' AND id <= %(max_id)s
  AND (%(owner)s::text IS NULL OR coalesce(owner, '-') = %(owner)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id LIMIT %(limit)s

-- name: max_job_id
SELECT coalesce(max(id), 0) AS id FROM pigeon_jobs

-- name: attempts_of
SELECT attempt, worker, started_at, finished_at, outcome, error FROM pigeon_job_attempts
WHERE job_id = %(job_id)s ORDER BY attempt

-- name: reconcile_obligations
SELECT o.name, o.status, count(*) AS n FROM pigeon_records AS r
JOIN pigeon_obligations AS o ON o.record_id = r.id
WHERE r.created_at >= %(since)s AND r.created_at < %(until)s
GROUP BY o.name, o.status

-- name: rows_reconcile_created
SELECT 1 FROM pigeon_records AS r JOIN pigeon_obligations AS o ON o.record_id = r.id
WHERE r.created_at >= %(since)s AND r.created_at < %(until)s AND o.name = %(name)s

-- name: rows_reconcile_completed
SELECT 1 FROM pigeon_records AS r JOIN pigeon_obligations AS o ON o.record_id = r.id
WHERE r.created_at >= %(since)s AND r.created_at < %(until)s AND o.name = %(name)s
  AND o.status = 'completed'

-- name: reconcile_effects
SELECT count(*) AS n FROM pigeon_effects
WHERE created_at >= %(since)s AND created_at < %(until)s

-- name: reconcile_outbox
SELECT count(*) AS created, count(published_at) AS confirmed FROM pigeon_outbox
WHERE created_at >= %(since)s AND created_at < %(until)s

-- name: owed_without_job
-- A pending obligation whose job is gone or no longer queued or running: nothing will
-- ever settle it.
SELECT o.record_id, o.name FROM pigeon_obligations AS o
LEFT JOIN pigeon_jobs AS j ON j.id = o.job_id
WHERE o.name = %(name)s AND o.status = 'pending'
  AND (j.id IS NULL OR j.status NOT IN ('queued', 'reserved'))
LIMIT %(limit)s

-- name: records_without_obligation
-- Accepted in the window, not complete, and no obligation at all (accept completes a
-- record with none at once).
SELECT r.id AS record_id FROM pigeon_records AS r
WHERE r.created_at >= %(since)s AND r.created_at < %(until)s AND r.status <> 'completed'
  AND NOT EXISTS (SELECT 1 FROM pigeon_obligations AS o WHERE o.record_id = r.id)
LIMIT %(limit)s

-- name: action_insert
INSERT INTO pigeon_operator_actions (at, actor, action, reason, selection, matched, done,
                                     skipped)
VALUES (%(at)s, %(actor)s, %(action)s, %(reason)s, %(selection)s, %(matched)s, %(done)s,
        %(skipped)s)
RETURNING id

-- name: action_log
SELECT id, at, actor, action, reason, selection, matched, done, skipped
FROM pigeon_operator_actions ORDER BY id DESC LIMIT %(limit)s

-- name: lifecycle_counts
-- Lifecycle events counted (pigeon.lifecycle): a few rows, one per kind seen.
SELECT kind, count, last_at, last_detail FROM pigeon_lifecycle_events ORDER BY kind

-- name: versioned_tasks
-- The tasks with live jobs of a payload version above 1 (pigeon/ops/deploys.py), by a
-- skip scan of the partial index pigeon_jobs_versioned: one probe per task, each with a
-- queue of its jobs and the newest version among them.
WITH RECURSIVE t AS (
    SELECT (SELECT task FROM pigeon_jobs
            WHERE version > 1 AND status IN ('queued', 'reserved')
            ORDER BY task LIMIT 1) AS task
    UNION ALL
    SELECT (SELECT j.task FROM pigeon_jobs AS j
            WHERE j.version > 1 AND j.status IN ('queued', 'reserved') AND j.task > t.task
            ORDER BY j.task LIMIT 1)
    FROM t WHERE t.task IS NOT NULL
)
SELECT t.task,
       (SELECT j.queue FROM pigeon_jobs AS j
        WHERE j.task = t.task AND j.version > 1 AND j.status IN ('queued', 'reserved')
        LIMIT 1) AS queue,
       (SELECT max(j.version) FROM pigeon_jobs AS j
        WHERE j.task = t.task AND j.version > 1 AND j.status IN ('queued', 'reserved'))
           AS newest
FROM t WHERE t.task IS NOT NULL

-- name: rows_jobs_newer
-- Waiting for a newer worker: due (queued, or with an expired lease) and of a payload
-- version newer than any live worker of the task's queue runs (known).
SELECT 1 FROM pigeon_jobs
WHERE task = %(task)s AND version > 1 AND version > %(known)s
  AND status IN ('queued', 'reserved')
  AND ((status = 'queued' AND scheduled_at <= %(now)s)
       OR (status = 'reserved' AND reserved_until < %(now)s))

-- name: unknown_tasks
-- Per task no live worker of the queue knows (known: the tasks they know, a JSON list),
-- its due jobs of version 1 (a later version is counted by jobs_newer). The claims pass
-- over them, so they gather at the head of the queue: only its oldest due jobs (scan of
-- each kind) are read, through the claim indexes; full: that read was cut short (each
-- count is then a floor).
WITH ready AS MATERIALIZED (
    SELECT task, version FROM pigeon_jobs
    WHERE queue = %(queue)s AND status = 'queued' AND scheduled_at <= %(now)s
    ORDER BY scheduled_at, id LIMIT %(scan)s
), expired AS MATERIALIZED (
    SELECT task, version FROM pigeon_jobs
    WHERE queue = %(queue)s AND status = 'reserved' AND reserved_until < %(now)s
    ORDER BY reserved_until LIMIT %(scan)s
)
SELECT task, count(*) AS n,
       ((SELECT count(*) FROM ready) >= %(scan)s
        OR (SELECT count(*) FROM expired) >= %(scan)s) AS full
FROM (SELECT * FROM ready UNION ALL SELECT * FROM expired) AS head
WHERE version <= 1 AND NOT ((SELECT %(known)s::jsonb) ? task)
GROUP BY task ORDER BY task
