-- The rehearsal's reads of a server database (pigeon.rehearse.tally): counts, and what
-- the requests of one principal prefix left behind.

-- name: tally
SELECT
    (SELECT count(*) FROM pigeon_records) AS records,
    (SELECT count(*) FROM pigeon_obligations) AS obligations,
    (SELECT count(*) FROM pigeon_jobs) AS jobs,
    (SELECT count(*) FROM pigeon_effects) AS effects,
    (SELECT count(*) FROM pigeon_outbox) AS outbox,
    (SELECT count(*) FROM pigeon_provider_calls) AS provider_calls,
    (SELECT count(*) FROM pigeon_jobs WHERE status = 'succeeded') AS succeeded_jobs,
    (SELECT count(*) FROM pigeon_outbox WHERE published_at IS NULL) AS unpublished,
    (SELECT count(*) FROM pigeon_jobs WHERE status IN ('queued', 'reserved')) AS open_jobs,
    (SELECT count(*) FROM pigeon_jobs WHERE status = 'failed' AND owner IS NOT NULL)
        AS failed_with_owner,
    (SELECT count(*) FROM pigeon_jobs WHERE status = 'failed' AND owner IS NULL)
        AS failed_without_owner

-- name: records_of
SELECT principal, count(*) AS n FROM pigeon_records
WHERE substr(principal, 1, length(%(prefix)s)) = %(prefix)s
GROUP BY principal

-- name: jobs_of
SELECT j.id, j.queue, j.task, j.status, j.owner, j.last_error, r.principal,
    (SELECT count(*) FROM pigeon_job_attempts AS a
     WHERE a.job_id = j.id AND a.outcome = 'succeeded') AS succeeded
FROM pigeon_jobs AS j JOIN pigeon_records AS r ON r.id = j.record_id
WHERE substr(r.principal, 1, length(%(prefix)s)) = %(prefix)s
ORDER BY j.id

-- name: open_by_queue
SELECT queue, count(*) AS n FROM pigeon_jobs
WHERE status IN ('queued', 'reserved')
GROUP BY queue

-- name: jobs_by_queue
SELECT queue, count(*) AS n FROM pigeon_jobs GROUP BY queue

-- name: outbox_last
SELECT coalesce(max(id), 0) AS id FROM pigeon_outbox

-- name: outbox_after
SELECT id, message_id, topic, published_at FROM pigeon_outbox WHERE id > %(after)s ORDER BY id

-- name: table_exists
SELECT 1 AS found FROM information_schema.tables
WHERE table_name = %(name)s AND table_schema = ANY (current_schemas(false))
