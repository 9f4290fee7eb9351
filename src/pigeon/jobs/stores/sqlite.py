"""The jobs store on SQLite: one writer (``BEGIN IMMEDIATE`` for writes), so nothing to
lock in order; statements by name from ``storage/sql/sqlite/jobs.sql``. Its session is
also the base of the PostgreSQL one: the statements both backends share by name.

The session seals what users wrote (a job's payload, its errors) with the transaction's
cipher as it writes them and opens them as it reads them (``pigeon.storage.crypto``): the
policy code above sees clear values only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, cast

from pigeon.jobs.job import Job, JobId
from pigeon.jobs.rows import (
    COMPLETED,
    SETTLED_STATE,
    AttemptRow,
    Breach,
    EventRow,
    FailedCount,
    FailedRecent,
    JobRow,
    NewJob,
    ObligationRow,
    OutboxLag,
    OutboxRow,
    Pressure,
    ProviderCall,
    QueueCounts,
    RecordRow,
    ReviewRow,
    WorkerRow,
    dumps,
)
from pigeon.jobs.store import JobStore
from pigeon.jobs.wakeup import Wakeup
from pigeon.logs import redact_text
from pigeon.storage.base import Database, Row, Tx
from pigeon.storage.sealed import (
    ATTEMPT_ERROR,
    EFFECT_RESULT,
    EVENT_DETAIL,
    JOB_ERROR,
    JOB_PAYLOAD,
    OUTBOX_PAYLOAD,
    PROVIDER_REQUEST,
    PROVIDER_RESULT,
    RECORD_DATA,
)


def rowcount(cursor: Any) -> int:
    """How many rows a statement touched (a driver's cursor; 0 if it cannot say)."""
    return int(getattr(cursor, "rowcount", 0) or 0)


class SqlJobSession:
    """The jobs statements on an open storage ``Tx`` (owned by the store or handed to it);
    every role of ``pigeon.jobs.store``."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    @property
    def tx(self) -> Tx:
        return self._tx

    def _open(self, row: Row) -> Row:
        """A job row with its payload and last error in clear (the payload as JSON text)."""
        cipher = self._tx.cipher
        row["payload"] = cipher.open(row["payload"], *JOB_PAYLOAD.ad, row["task"])
        if "last_error" in row:
            error = cipher.open(row["last_error"], *JOB_ERROR.ad, str(row["id"]))
            row["last_error"] = redact_text(error)  # recorded before errors were redacted
        return row

    def insert_job(self, job: NewJob) -> JobId:
        payload = self._tx.cipher.seal(job.payload, *JOB_PAYLOAD.ad, job.task)
        row = self._tx.fetchone("job_insert", {**asdict(job), "payload": payload})
        if row is None:
            existing = self._tx.fetchone("job_by_unique_key", {"unique_key": job.unique_key})
            assert existing is not None
            return int(existing["id"])
        return int(row["id"])

    def claim_due(
        self, *, queue: str, worker: str, token: str, now: float, until: float, n: int,
        start: int, versions: Mapping[str, int],
    ) -> list[Job]:  # fmt: skip
        params = {"queue": queue, "worker": worker, "token": token, "now": now, "until": until}
        params.update(n=n, versions=dumps(dict(versions)))
        # SQLite returns an UPDATE's rows in no promised order: the batch runs in due
        # order, as PostgreSQL's claim returns it.
        rows = sorted(
            (self._open(r) for r in self._tx.fetchall("job_claim", params)),
            key=lambda r: (r["scheduled_at"], r["id"]),
        )
        if rows[:start]:  # the jobs the caller runs at once: started with their claim
            self._tx.executemany(
                "job_start",
                [
                    {"id": r["id"], "attempt": r["attempts"], "token": token, "now": now}
                    for r in rows[:start]
                ],
            )
        if rows:
            self._tx.executemany(
                "job_attempt_start",
                [
                    {"job_id": r["id"], "attempt": r["attempts"], "worker": worker, "now": now}
                    for r in rows
                ],
            )
        return [Job.from_row(row, now) for row in rows]

    def mark_started(self, job: Job, now: float) -> bool:
        return bool(rowcount(self._tx.execute("job_start", {**job.key(), "now": now})))

    def mark_attempt_lost(self, job_id: JobId, attempt: int, now: float) -> None:
        self._tx.execute("job_attempt_lost", {"job_id": job_id, "attempt": attempt, "now": now})

    def lock_in_order(self, jobs: Sequence[Job], *, jobs_held: bool = False) -> None:
        """SQLite has one writer: nothing to order."""

    def renew_leases(self, jobs: Sequence[Job], until: float) -> set[JobId]:
        return {
            job.id
            for job in jobs
            if rowcount(self._tx.execute("job_renew", {**job.key(), "until": until}))
        }

    def mark_succeeded(self, jobs: Sequence[Job], now: float) -> set[JobId]:
        done = set()
        for job in jobs:
            if rowcount(self._tx.execute("job_succeed", {**job.key(), "now": now})):
                self.finish_attempt(job, outcome="succeeded", error=None, now=now)
                done.add(job.id)
        return done

    def requeue(self, job: Job, *, scheduled_at: float, error: str | None, refund: int) -> bool:
        sealed = self._tx.cipher.seal(error, *JOB_ERROR.ad, str(job.id))
        params = {**job.key(), "scheduled_at": scheduled_at, "error": sealed, "refund": refund}
        return bool(rowcount(self._tx.execute("job_requeue", params)))

    def mark_failed(
        self, job: Job, *, now: float, error: str, owner: str, not_before: float
    ) -> bool:
        sealed = self._tx.cipher.seal(error, *JOB_ERROR.ad, str(job.id))
        params = {**job.key(), "now": now, "error": sealed, "owner": owner}
        return bool(rowcount(self._tx.execute("job_fail", {**params, "not_before": not_before})))

    def finish_attempt(self, job: Job, *, outcome: str, error: str | None, now: float) -> None:
        self._tx.execute(
            "job_attempt_finish",
            {
                "job_id": job.id,
                "attempt": job.attempt,
                "outcome": outcome,
                "error": self._tx.cipher.seal(
                    error, *ATTEMPT_ERROR.ad, str(job.id), str(job.attempt)
                ),
                "now": now,
                "started_at": job.started_at,
            },
        )

    def notify_ready(self, queue: str) -> None:
        """Workers poll: nothing to announce."""

    def queue_pressure(self, queue: str, now: float, cap: int) -> Pressure | None:
        params = {"queue": queue, "now": now, "cap": cap}
        return cast("Pressure | None", self._tx.fetchone("job_queue_pressure", params))

    def insert_record(
        self, *, record_id: str, kind: str, data: str, principal: str | None, now: float
    ) -> None:
        sealed = self._tx.cipher.seal(data, *RECORD_DATA.ad, record_id)
        self._tx.execute(
            "rec_insert",
            {"id": record_id, "kind": kind, "data": sealed, "status": "received", "now": now,
             "principal": principal},
        )  # fmt: skip

    def insert_obligation(self, record_id: str, name: str, job_id: JobId, now: float) -> None:
        self._tx.execute(
            "obl_insert",
            {"record_id": record_id, "name": name, "job_id": job_id, "status": "pending",
             "now": now},
        )  # fmt: skip

    def complete_record(self, record_id: str, now: float) -> bool:
        return bool(rowcount(self._tx.execute("rec_complete", {"id": record_id, "now": now})))

    def job_by_unique_key(self, unique_key: str) -> JobId | None:
        row = self._tx.fetchone("job_by_unique_key", {"unique_key": unique_key})
        return None if row is None else int(row["id"])

    def ledger_event(
        self, record_id: str, obligation: str | None, kind: str, detail: Any, now: float
    ) -> None:
        sealed = (
            None
            if detail is None
            else self._tx.cipher.seal(dumps(detail), *EVENT_DETAIL.ad, record_id)
        )
        self._tx.execute(
            "rec_event_insert",
            {"record_id": record_id, "obligation": obligation, "state": kind, "detail": sealed,
             "now": now},
        )  # fmt: skip

    def settle_obligation(
        self, record_id: str, obligation: str, status: str, detail: Any, now: float
    ) -> None:
        # The record's lock first: two obligations settling at once must not each see the
        # other still pending (READ COMMITTED), or the record never completes.
        self._tx.execute("rec_lock", {"record_id": record_id})
        self._tx.execute(
            "obl_set_status",
            {"record_id": record_id, "name": obligation, "status": status, "now": now},
        )
        self.ledger_event(record_id, obligation, SETTLED_STATE[status], detail, now)
        if status == "completed":
            row = self._tx.fetchone("obl_open_count", {"record_id": record_id})
            if row is not None and int(row["n"]) == 0 and self.complete_record(record_id, now):
                self.ledger_event(record_id, None, COMPLETED, None, now)

    def get_record(self, record_id: str) -> RecordRow | None:
        row = self._tx.fetchone("rec_get", {"id": record_id})
        if row is not None:
            row["data"] = self._tx.cipher.open(row["data"], *RECORD_DATA.ad, record_id)
        return cast("RecordRow | None", row)

    def obligations_of(self, record_id: str) -> list[ObligationRow]:
        return cast("list[ObligationRow]", self._tx.fetchall("obl_list", {"record_id": record_id}))

    def events_of(self, record_id: str) -> list[EventRow]:
        rows = self._tx.fetchall("rec_events", {"record_id": record_id})
        for row in rows:
            row["detail"] = self._tx.cipher.open(row["detail"], *EVENT_DETAIL.ad, record_id)
        return cast("list[EventRow]", rows)

    def get_job(self, job_id: JobId) -> JobRow | None:
        row = self._tx.fetchone("job_get", {"id": job_id})
        return None if row is None else cast("JobRow", self._open(row))

    def list_jobs(self, *, status: str | None, queue: str | None, limit: int) -> list[JobRow]:
        params = {"status": status, "queue": queue, "limit": limit}
        return [cast("JobRow", self._open(row)) for row in self._tx.fetchall("job_list", params)]

    def attempts_of(self, job_id: JobId) -> list[AttemptRow]:
        rows = self._tx.fetchall("job_attempts", {"job_id": job_id})
        for row in rows:
            ad = (str(job_id), str(row["attempt"]))
            row["error"] = redact_text(self._tx.cipher.open(row["error"], *ATTEMPT_ERROR.ad, *ad))
        return cast("list[AttemptRow]", rows)

    def reviews_of(self, job_id: JobId) -> list[ReviewRow]:
        return cast("list[ReviewRow]", self._tx.fetchall("job_reviews", {"job_id": job_id}))

    def review(self, job_id: JobId, action: str, now: float) -> bool:
        query = {"retry": "job_review_retry", "cancel": "job_review_cancel"}[action]
        return bool(rowcount(self._tx.execute(query, {"id": job_id, "now": now})))

    def record_review(
        self, job_id: JobId, *, action: str, reviewer: str, reason: str, now: float
    ) -> None:
        self._tx.execute(
            "job_review_insert",
            {
                "job_id": job_id,
                "action": action,
                "reviewer": reviewer,
                "reason": reason,
                "now": now,
            },
        )

    def purge_finished(self, *, before: float, limit: int) -> int:
        params = {"before": before, "limit": limit}
        self._tx.execute("job_purge_attempts", params)
        self._tx.execute("job_purge_reviews", params)
        return rowcount(self._tx.execute("job_purge_finished", params))

    def purge_ticks(self, *, schedule: str, before_tick: int, limit: int) -> int:
        params = {"schedule": schedule, "before_tick": before_tick, "limit": limit}
        return rowcount(self._tx.execute("tick_purge", params))

    def take_tick(self, schedule: str, tick: int, now: float) -> bool:
        params = {"schedule": schedule, "tick": tick, "now": now}
        return bool(rowcount(self._tx.execute("tick_claim", params)))

    def set_tick_job(self, schedule: str, tick: int, job_id: JobId) -> None:
        self._tx.execute("tick_set_job", {"schedule": schedule, "tick": tick, "job_id": job_id})

    def open_breach(self, *, queue: str, now: float, age: float, objective: float) -> bool:
        params = {"queue": queue, "now": now, "age": age, "objective": objective}
        return self._tx.fetchone("breach_open", params) is not None

    def close_breach(self, queue: str) -> None:
        self._tx.execute("breach_close", {"queue": queue})

    def breaches(self) -> list[Breach]:
        return cast("list[Breach]", self._tx.fetchall("breach_list", {}))

    def queue_counts(self, now: float) -> list[QueueCounts]:
        return cast("list[QueueCounts]", self._tx.fetchall("job_queue_stats", {"now": now}))

    def failed_counts(self) -> list[FailedCount]:
        return cast("list[FailedCount]", self._tx.fetchall("job_failed_by_owner", {}))

    def failed_recent(self, limit: int) -> list[FailedRecent]:
        rows = self._tx.fetchall("job_failed_recent", {"limit": limit})
        for row in rows:
            error = self._tx.cipher.open(row["last_error"], *JOB_ERROR.ad, str(row["id"]))
            row["last_error"] = redact_text(error)
        return cast("list[FailedRecent]", rows)

    def service_times(self, queue: str, limit: int) -> list[float]:
        rows = self._tx.fetchall("job_service_times", {"queue": queue, "limit": limit})
        return [float(row["seconds"]) for row in rows]

    def add_outbox(self, *, message_id: str, topic: str, payload: str, now: float) -> None:
        sealed = self._tx.cipher.seal(payload, *OUTBOX_PAYLOAD.ad, message_id)
        params = {"message_id": message_id, "topic": topic, "payload": sealed, "now": now}
        self._tx.execute("outbox_insert", params)

    def outbox_pending(self, limit: int) -> list[OutboxRow]:
        rows = self._tx.fetchall("outbox_pending", {"limit": limit})
        for row in rows:
            ad = (*OUTBOX_PAYLOAD.ad, row["message_id"])
            row["payload"] = self._tx.cipher.open(row["payload"], *ad)
        return cast("list[OutboxRow]", rows)

    def mark_published(self, row_ids: Sequence[int], now: float) -> None:
        if row_ids:
            self._tx.executemany("outbox_mark_published", [{"id": i, "now": now} for i in row_ids])

    def mark_outbox_error(self, row_id: int, error: str) -> None:
        self._tx.execute("outbox_mark_error", {"id": row_id, "error": error})

    def purge_published(self, *, before: float, limit: int) -> int:
        return rowcount(self._tx.execute("outbox_purge", {"before": before, "limit": limit}))

    def claim_effect(self, scope: str, key: str, now: float) -> bool:
        params = {"scope": scope, "key": key, "now": now}
        return self._tx.fetchone("effect_claim", params) is not None

    def effect_result(self, scope: str, key: str) -> str | None:
        row = self._tx.fetchone("effect_get", {"scope": scope, "key": key})
        if row is None:
            return None
        opened: str = self._tx.cipher.open(row["result"], *EFFECT_RESULT.ad, scope, key)
        return opened

    def set_effect_result(self, scope: str, key: str, result: str) -> None:
        sealed = self._tx.cipher.seal(result, *EFFECT_RESULT.ad, scope, key)
        self._tx.execute("effect_set_result", {"scope": scope, "key": key, "result": sealed})

    def provider_call(self, reference: str) -> ProviderCall | None:
        row = self._tx.fetchone("provider_get", {"reference": reference})
        if row is not None:
            opened = self._tx.cipher.open
            row["request"] = opened(row["request"], *PROVIDER_REQUEST.ad, reference)
            row["result"] = opened(row["result"], *PROVIDER_RESULT.ad, reference)
        return cast("ProviderCall | None", row)

    def insert_provider_call(
        self, *, reference: str, provider: str, idempotency_key: str, request: str, now: float
    ) -> None:
        sealed = self._tx.cipher.seal(request, *PROVIDER_REQUEST.ad, reference)
        self._tx.execute(
            "provider_insert",
            {"reference": reference, "provider": provider, "idempotency_key": idempotency_key,
             "request": sealed, "now": now},
        )  # fmt: skip

    def count_provider_attempt(self, reference: str, now: float) -> None:
        self._tx.execute("provider_attempt", {"reference": reference, "now": now})

    def settle_provider_call(self, reference: str, status: str, result: str, now: float) -> None:
        sealed = self._tx.cipher.seal(result, *PROVIDER_RESULT.ad, reference)
        params = {"reference": reference, "status": status, "result": sealed, "now": now}
        self._tx.execute("provider_settle", params)

    def revoke_principal(self, principal: str, reason: str, now: float) -> None:
        params = {"principal": principal, "reason": reason, "now": now}
        self._tx.execute("principal_revoke", params)

    def restore_principal(self, principal: str) -> None:
        self._tx.execute("principal_restore", {"principal": principal})

    def principal_revoked(self, principal: str) -> str | None:
        row = self._tx.fetchone("principal_revoked", {"principal": principal})
        return None if row is None else str(row["reason"])

    def advertise_worker(self, row: WorkerRow) -> None:
        self._tx.execute("worker_advertise", dict(row))

    def withdraw_worker(self, name: str) -> None:
        self._tx.execute("worker_withdraw", {"name": name})

    def forget_workers(self, before: float) -> int:
        return rowcount(self._tx.execute("worker_forget", {"before": before}))

    def workers_seen(self, since: float) -> list[WorkerRow]:
        return cast("list[WorkerRow]", self._tx.fetchall("worker_list", {"since": since}))

    def outbox_lag(self) -> OutboxLag:
        row = self._tx.fetchone("outbox_lag", {})
        return cast("OutboxLag", row) if row is not None else {"pending": 0, "oldest": None}


class SqliteJobStore(JobStore[SqlJobSession]):
    def __init__(self, db: Database) -> None:
        self.db = db

    @contextmanager
    def transaction(self) -> Iterator[SqlJobSession]:
        with self.db.transaction() as tx:
            yield SqlJobSession(tx)

    @contextmanager
    def reading(self) -> Iterator[SqlJobSession]:
        with self.db.reading() as tx:  # a deferred BEGIN: never queued for the writer
            yield SqlJobSession(tx)

    def wakeup(self, queues: Iterable[str]) -> Wakeup:
        return Wakeup(queues)
