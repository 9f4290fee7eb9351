"""The jobs store on PostgreSQL: claims with ``FOR UPDATE SKIP LOCKED`` and their attempts
started in the same statement, set-based renewals and successes over parallel arrays
(one round trip per batch), row locks taken in one order, ``NOTIFY`` when a job becomes
ready, and a ``LISTEN`` thread on the database's dedicated connection to wake idle
workers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from pigeon.exceptions import StoreError
from pigeon.jobs.job import Job, JobId
from pigeon.jobs.rows import dumps
from pigeon.jobs.store import JobStore
from pigeon.jobs.stores.sqlite import SqlJobSession
from pigeon.jobs.wakeup import Wakeup, channel
from pigeon.logs import summary
from pigeon.storage.base import Database
from pigeon.storage.postgres import PostgresDatabase

log = logging.getLogger("pigeon.jobs.wakeup")


def _arrays(jobs: Sequence[Job], until: float | None) -> dict[str, Any]:
    """Parallel arrays of (id, attempt, token, started) for the set-based statements."""
    return {
        "ids": [j.id for j in jobs],
        "attempts": [j.attempt for j in jobs],
        "tokens": [j.token for j in jobs],
        "started": [j.started_at for j in jobs],
        "until": until,
    }


class PostgresJobSession(SqlJobSession):
    def claim_due(
        self, *, queue: str, worker: str, token: str, now: float, until: float, n: int,
        start: int, versions: Mapping[str, int],
    ) -> list[Job]:  # fmt: skip
        params = {"queue": queue, "worker": worker, "token": token, "now": now, "until": until}
        params.update(n=n, start=start, versions=dumps(dict(versions)))
        rows = self.tx.fetchall("job_claim_start", params)
        return [Job.from_row(self._open(row), now) for row in rows]

    def lock_in_order(self, jobs: Sequence[Job], *, jobs_held: bool = False) -> None:
        """Take the row locks a transaction about ``jobs`` will need before it writes
        anything, in the one order every such transaction follows: the jobs by ascending
        id, then their records by ascending id.

        Without it, rows are locked as statements reach them: a batch's successes before
        its failures, records in the order of their jobs, an attempt event's foreign key
        (KEY SHARE on the record) before the record's FOR UPDATE. Two finishes, or a finish
        and the heartbeat's renewal, meeting the same rows in other orders then deadlock,
        and PostgreSQL aborts one of them: a renewal lost or a finish retried after a
        second's stall. ``jobs_held``: the caller already holds the job rows (a claim took
        them with SKIP LOCKED, which never waits)."""
        if not jobs:
            return
        record_ids = sorted({j.record_id for j in jobs if j.record_id})
        job_ids = sorted({j.id for j in jobs})
        # One row is ordered by itself, unless records are locked after it.
        if not jobs_held and (len(job_ids) > 1 or record_ids):
            self.tx.execute("job_lock_many", {"ids": job_ids})
        if record_ids:
            self.tx.execute("rec_lock_many", {"record_ids": record_ids})

    def renew_leases(self, jobs: Sequence[Job], until: float) -> set[JobId]:
        return {int(row["id"]) for row in self.tx.fetchall("job_renew_many", _arrays(jobs, until))}

    def mark_succeeded(self, jobs: Sequence[Job], now: float) -> set[JobId]:
        if not jobs:
            return set()
        params = {**_arrays(jobs, None), "now": now}
        return {int(row["id"]) for row in self.tx.fetchall("job_succeed_many", params)}

    def notify_ready(self, queue: str) -> None:
        self.tx.execute("job_notify", {"queue": queue})

    def purge_finished(self, *, before: float, limit: int) -> int:
        params = {"before": before, "limit": limit}
        return len(self.tx.fetchall("job_purge_finished", params))


class PostgresJobStore(JobStore[PostgresJobSession]):
    def __init__(self, db: Database) -> None:
        self.db = db

    @contextmanager
    def transaction(self) -> Iterator[PostgresJobSession]:
        with self.db.transaction() as tx:
            yield PostgresJobSession(tx)

    reading = transaction

    def wakeup(self, queues: Iterable[str]) -> Wakeup:
        if isinstance(self.db, PostgresDatabase):
            return ListenWakeup(self.db, queues)
        return Wakeup(queues)  # a wrapper without a dedicated connection: polling


class ListenWakeup(Wakeup):
    """``LISTEN`` on the queues' channels from a thread holding the database's dedicated
    connection (outside the pool). If it drops, the listener reconnects with backoff and
    wakes every queue once, since notifications sent meanwhile are lost."""

    def __init__(self, db: PostgresDatabase, queues: Iterable[str]) -> None:
        names = list(queues)
        super().__init__(names)
        self.db = db
        self._by_channel = {channel(q): q for q in names}
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()
        self.connects = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pigeon-listen", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        super().close()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        backoff = 0.05
        while not self._closed.is_set():
            try:
                with self.db.dedicated_connection() as conn:
                    for name in self._by_channel:
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                    self.connects += 1
                    self.listening.set()
                    backoff = 0.05
                    # Anything announced while we were not listening is lost: poll once.
                    self.wake_all()
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            queue = self._by_channel.get(note.channel)
                            if queue is not None:
                                self.wake(queue)
            except (psycopg.Error, StoreError) as exc:
                self.listening.clear()
                if not self._closed.is_set():
                    log.warning("LISTEN connection lost (%s); reconnecting", summary(exc))
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        self.listening.clear()
