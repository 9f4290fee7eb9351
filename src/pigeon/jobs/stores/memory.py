"""The jobs store in memory: the real ``JobManager``, ``Worker``, failed store, retention
and schedules run on it without a database (the analogue of Procrastinate's
``InMemoryConnector``), for the unit tier and for trying an app out.

One writer at a time, as on SQLite: a transaction holds the store's lock and works on
the live tables, which it restores from a copy taken at its start if it raises. Records
and obligations are kept as far as the jobs need them: ``add_record`` makes one, the
ledger's events are appended to ``events``.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.job import Job, JobId
from pigeon.jobs.rows import (
    COMPLETED,
    SETTLED_STATE,
    AttemptRow,
    Breach,
    EventRow,
    JobRow,
    NewJob,
    ObligationRow,
    Pressure,
    RecordRow,
    ReviewRow,
    dumps,
)
from pigeon.jobs.store import ANY_TASK, JobStore
from pigeon.jobs.stores.memory_tables import JOB_COLUMNS, Row, Tables, TableStatements, pick
from pigeon.jobs.wakeup import Wakeup
from pigeon.storage.base import Params, Tx
from pigeon.storage.crypto import PLAIN


class MemoryJobTx:
    """The transaction a memory session hands application callbacks (an access re-check,
    an effect's mutation) and the jobs helpers (``access.revoked(tx, ...)``): a storage
    ``Tx`` that runs no SQL. Its savepoint restores the tables on error."""

    backend = "memory"
    cipher = PLAIN

    def __init__(self, session: MemoryJobSession) -> None:
        self.session = session

    def _no_sql(self, name: str) -> NoReturn:
        raise InvalidOperation(f"the in-memory jobs store runs no SQL ({name!r})")

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._no_sql(name)

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        return self._no_sql(name)

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self._no_sql(name)

    def executemany(self, name: str, params: Sequence[Params]) -> int:
        return self._no_sql(name)

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._no_sql(statement)

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        return self._no_sql(statement)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        store = self.session.store
        saved = copy.deepcopy(store.tables)
        try:
            yield
        except BaseException:
            store.tables = saved
            raise


def memory_session(tx: Tx) -> MemoryJobSession:
    """The memory session of a ``MemoryJobTx`` (``session_for``'s entry for "memory")."""
    if not isinstance(tx, MemoryJobTx):
        raise TypeError(f"the in-memory jobs store cannot join a {type(tx).__name__}")
    return tx.session


class MemoryJobSession(TableStatements):
    """The jobs statements on the in-memory tables; the caller holds the store's lock.
    Every role of ``pigeon.jobs.store``."""

    def __init__(self, store: MemoryJobStore) -> None:
        self.store = store
        self._tx = MemoryJobTx(self)

    @property
    def tx(self) -> Tx:
        return self._tx

    @property
    def _t(self) -> Tables:
        return self.store.tables

    def _held(self, job: Job) -> Row | None:
        row = self._t.jobs.get(job.id)
        if (
            row is None
            or row["status"] != "reserved"
            or row["attempts"] != job.attempt
            or row["lease_token"] != job.token
        ):
            return None
        return row

    def insert_job(self, job: NewJob) -> JobId:
        key = job.unique_key
        if key is not None:
            for row in self._t.jobs.values():
                if row["unique_key"] == key:
                    return int(row["id"])
        job_id = self._t.next_id
        self._t.next_id += 1
        row = dict.fromkeys(JOB_COLUMNS)
        row.update(
            id=job_id, queue=job.queue, task=job.task, payload=job.payload, status="queued",
            attempts=0, max_attempts=job.max_attempts, attempt_base=0, max_age=job.max_age,
            created_at=job.now, budget_start=job.scheduled_at, scheduled_at=job.scheduled_at,
            owner=job.owner, record_id=job.record_id, obligation=job.obligation, unique_key=key,
            version=job.version,
        )  # fmt: skip
        self._t.jobs[job_id] = row
        return job_id

    def claim_due(
        self, *, queue: str, worker: str, token: str, now: float, until: float, n: int,
        start: int, versions: Mapping[str, int],
    ) -> list[Job]:  # fmt: skip
        due = sorted(
            (
                r
                for r in self._t.jobs.values()
                if r["queue"] == queue
                and (
                    (r["status"] == "queued" and r["scheduled_at"] <= now)
                    or (r["status"] == "reserved" and r["reserved_until"] < now)
                )
                and r["version"] <= versions.get(r["task"], versions.get(ANY_TASK, 0))
            ),
            key=lambda r: (r["scheduled_at"], r["id"]),
        )[:n]
        for rank, row in enumerate(due):
            row.update(
                status="reserved", attempts=row["attempts"] + 1, lease_token=token,
                worker=worker, reserved_until=until, claimed_at=now,
                started_at=now if rank < start else None,
            )  # fmt: skip
            self._t.attempts[row["id"], row["attempts"]] = {
                "attempt": row["attempts"], "worker": worker, "started_at": now,
                "finished_at": None, "outcome": "running", "error": None,
            }  # fmt: skip
        return [Job.from_row(row, now) for row in due]

    def mark_started(self, job: Job, now: float) -> bool:
        row = self._held(job)
        if row is None:
            return False
        row["started_at"] = now
        return True

    def mark_attempt_lost(self, job_id: JobId, attempt: int, now: float) -> None:
        for (jid, n), row in self._t.attempts.items():
            if jid == job_id and n < attempt and row["outcome"] == "running":
                row.update(outcome="lease_expired", finished_at=now)

    def lock_in_order(self, jobs: Sequence[Job], *, jobs_held: bool = False) -> None:
        """One writer at a time: nothing to order."""

    def renew_leases(self, jobs: Sequence[Job], until: float) -> set[JobId]:
        held = set()
        for job in jobs:
            row = self._held(job)
            if row is not None:
                row["reserved_until"] = until
                held.add(job.id)
        return held

    def mark_succeeded(self, jobs: Sequence[Job], now: float) -> set[JobId]:
        done = set()
        for job in jobs:
            row = self._held(job)
            if row is not None:
                row.update(
                    status="succeeded", finished_at=now, reserved_until=None, last_error=None
                )
                self.finish_attempt(job, outcome="succeeded", error=None, now=now)
                done.add(job.id)
        return done

    def requeue(self, job: Job, *, scheduled_at: float, error: str | None, refund: int) -> bool:
        row = self._held(job)
        if row is None:
            return False
        row.update(
            status="queued", scheduled_at=scheduled_at, reserved_until=None, last_error=error,
            attempts=row["attempts"] - refund,
        )  # fmt: skip
        return True

    def mark_failed(
        self, job: Job, *, now: float, error: str, owner: str, not_before: float
    ) -> bool:
        row = self._held(job)
        if row is None:
            return False
        row.update(
            status="failed", finished_at=now, reserved_until=None, last_error=error,
            owner=owner, scheduled_at=max(row["scheduled_at"], not_before),
        )  # fmt: skip
        return True

    def finish_attempt(self, job: Job, *, outcome: str, error: str | None, now: float) -> None:
        row = self._t.attempts.get((job.id, job.attempt))
        if row is not None:
            row.update(outcome=outcome, error=error, finished_at=now, started_at=job.started_at)

    def notify_ready(self, queue: str) -> None:
        self.store.announced.append(queue)

    def queue_pressure(self, queue: str, now: float, cap: int) -> Pressure | None:
        # As jobs.sql's job_queue_pressure: waiting is queued and due, claimed but not
        # started, or with an expired lease.
        mine = [r for r in self._t.jobs.values() if r["queue"] == queue]
        ready = [r for r in mine if r["status"] == "queued" and r["scheduled_at"] <= now]
        reserved = [r for r in mine if r["status"] == "reserved"]
        unstarted = [r for r in reserved if r["started_at"] is None]
        live_unstarted = [r for r in unstarted if r["reserved_until"] >= now]
        expired = [r for r in reserved if r["reserved_until"] < now]
        oldest = min((r["scheduled_at"] for r in ready + unstarted), default=None)
        backlog = sum(min(len(part), cap) for part in (ready, live_unstarted, expired))
        return {"backlog": backlog, "oldest_ready_at": oldest}

    # -- records and the ledger ------------------------------------------------------

    def insert_record(
        self, *, record_id: str, kind: str, data: str, principal: str | None, now: float
    ) -> None:
        if record_id in self._t.records:  # the primary key
            raise InvalidOperation(f"record {record_id!r} exists already")
        self._t.records[record_id] = {
            "id": record_id, "kind": kind, "data": data, "status": "received",
            "created_at": now, "completed_at": None, "principal": principal,
        }  # fmt: skip

    def insert_obligation(self, record_id: str, name: str, job_id: JobId, now: float) -> None:
        self._t.obligations[record_id, name] = {
            "record_id": record_id, "name": name, "job_id": job_id, "status": "pending",
            "updated_at": now,
        }  # fmt: skip

    def complete_record(self, record_id: str, now: float) -> bool:
        record = self._t.records.get(record_id)
        if record is None or record["status"] == "completed":
            return False
        record.update(status="completed", completed_at=now)
        return True

    def job_by_unique_key(self, unique_key: str) -> JobId | None:
        for row in self._t.jobs.values():
            if row["unique_key"] == unique_key:
                return int(row["id"])
        return None

    def ledger_event(
        self, record_id: str, obligation: str | None, kind: str, detail: Any, now: float
    ) -> None:
        # Kept as the JSON text the SQL stores seal, so a detail they could not store
        # fails here too, and a later change to the caller's dict does not show.
        text = None if detail is None else dumps(detail)
        self._t.events.append(
            {"id": len(self._t.events) + 1, "record_id": record_id, "obligation": obligation,
             "state": kind, "detail": text, "at": now}
        )  # fmt: skip

    def settle_obligation(
        self, record_id: str, obligation: str, status: str, detail: Any, now: float
    ) -> None:
        row = self._t.obligations.get((record_id, obligation))
        if row is not None:
            row.update(status=status, updated_at=now)
        self.ledger_event(record_id, obligation, SETTLED_STATE[status], detail, now)
        if status != "completed":
            return
        still_open = [
            o
            for (rid, _), o in self._t.obligations.items()
            if rid == record_id and o["status"] != "completed"
        ]
        if not still_open and self.complete_record(record_id, now):
            self.ledger_event(record_id, None, COMPLETED, None, now)

    def get_record(self, record_id: str) -> RecordRow | None:
        row = self._t.records.get(record_id)
        return None if row is None else pick(RecordRow, row)

    def obligations_of(self, record_id: str) -> list[ObligationRow]:
        mine = sorted(self._t.obligations.items())  # by (record, name): the primary key
        return [pick(ObligationRow, o) for (rid, _), o in mine if rid == record_id]

    def events_of(self, record_id: str) -> list[EventRow]:
        return [pick(EventRow, e) for e in self._t.events if e["record_id"] == record_id]

    # -- the failed store ------------------------------------------------------------

    def get_job(self, job_id: JobId) -> JobRow | None:
        row = self._t.jobs.get(job_id)
        return None if row is None else pick(JobRow, row)

    def list_jobs(self, *, status: str | None, queue: str | None, limit: int) -> list[JobRow]:
        rows = [
            pick(JobRow, r)
            for r in self._t.jobs.values()
            if (status is None or r["status"] == status) and (queue is None or r["queue"] == queue)
        ]
        return sorted(rows, key=lambda r: -r["id"])[:limit]

    def attempts_of(self, job_id: JobId) -> list[AttemptRow]:
        mine = sorted(self._t.attempts.items())  # by (job, attempt): the primary key
        return [pick(AttemptRow, r) for (jid, _), r in mine if jid == job_id]

    def reviews_of(self, job_id: JobId) -> list[ReviewRow]:
        return [pick(ReviewRow, r) for r in self._t.reviews if r["job_id"] == job_id]

    def review(self, job_id: JobId, action: str, now: float) -> bool:
        row = self._t.jobs.get(job_id)
        if row is None:
            return False
        if action == "retry" and row["status"] == "failed":
            start = max(now, row["scheduled_at"])
            row.update(
                status="queued", attempt_base=row["attempts"], budget_start=start,
                scheduled_at=start, reserved_until=None, lease_token=None, finished_at=None,
            )  # fmt: skip
            return True
        if action == "cancel" and row["status"] in ("failed", "queued"):
            row.update(status="cancelled", finished_at=now, reserved_until=None, lease_token=None)
            return True
        return False

    def record_review(
        self, job_id: JobId, *, action: str, reviewer: str, reason: str, now: float
    ) -> None:
        self._t.reviews.append(
            {"job_id": job_id, "action": action, "reviewer": reviewer, "reason": reason, "at": now}
        )

    # -- retention and schedules ---------------------------------------------------------

    def purge_finished(self, *, before: float, limit: int) -> int:
        doomed = sorted(
            (
                r
                for r in self._t.jobs.values()
                if r["status"] in ("succeeded", "cancelled") and r["finished_at"] < before
            ),
            key=lambda r: (r["finished_at"], r["id"]),
        )[:limit]
        ids = {r["id"] for r in doomed}
        for job_id in ids:
            del self._t.jobs[job_id]
        self._t.attempts = {k: v for k, v in self._t.attempts.items() if k[0] not in ids}
        self._t.reviews = [r for r in self._t.reviews if r["job_id"] not in ids]
        return len(ids)

    def purge_ticks(self, *, schedule: str, before_tick: int, limit: int) -> int:
        doomed = sorted(k for k in self._t.ticks if k[0] == schedule and k[1] < before_tick)
        for key in doomed[: max(limit, 1)]:
            del self._t.ticks[key]
        return min(len(doomed), max(limit, 1))

    def take_tick(self, schedule: str, tick: int, now: float) -> bool:
        if (schedule, tick) in self._t.ticks:
            return False
        self._t.ticks[schedule, tick] = {"claimed_at": now, "job_id": None}
        return True

    def set_tick_job(self, schedule: str, tick: int, job_id: JobId) -> None:
        self._t.ticks[schedule, tick]["job_id"] = job_id

    # -- freshness -------------------------------------------------------------------

    def open_breach(self, *, queue: str, now: float, age: float, objective: float) -> bool:
        if queue in self._t.breaches:
            return False
        self._t.breaches[queue] = {"queue": queue, "since": now, "age": age, "objective": objective}
        return True

    def close_breach(self, queue: str) -> None:
        self._t.breaches.pop(queue, None)

    def breaches(self) -> list[Breach]:
        return [pick(Breach, self._t.breaches[q]) for q in sorted(self._t.breaches)]


class MemoryJobStore(JobStore[MemoryJobSession]):
    """Jobs in this process's memory; lost when it ends. Thread-safe (one writer)."""

    def __init__(self) -> None:
        self.tables = Tables()
        self.announced: list[str] = []  # queues whose jobs became ready other than by insert
        self._lock = threading.RLock()

    @contextmanager
    def transaction(self) -> Iterator[MemoryJobSession]:
        with self._lock:
            saved = copy.deepcopy(self.tables)
            try:
                yield MemoryJobSession(self)
            except BaseException:
                self.tables = saved
                raise

    reading = transaction

    def wakeup(self, queues: Iterable[str]) -> Wakeup:
        return Wakeup(queues)

    # -- for tests ---------------------------------------------------------------------

    def add_record(self, record_id: str, obligations: Iterable[str] = ()) -> None:
        """A record whose obligations the jobs settle, without jobs of its own (on any
        store ``records.accept`` writes the record, its obligations and their jobs)."""
        with self.transaction() as session:
            session.insert_record(
                record_id=record_id, kind="test", data="null", principal=None, now=0
            )
            for name in obligations:
                session.insert_obligation(record_id, name, 0, 0)

    def job(self, job_id: JobId) -> Row:
        with self._lock:
            return dict(self.tables.jobs[job_id])

    def jobs(self, status: str | None = None) -> list[Row]:
        with self._lock:
            return [dict(r) for r in self.tables.jobs.values() if status in (None, r["status"])]
