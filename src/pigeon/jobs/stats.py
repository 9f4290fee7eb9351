"""What the queues look like now, against their objectives: the numbers behind
``pigeon jobs stats``, the dashboard and the metrics, and the freshness alert.

A queue's freshness is the age of its oldest *eligible-ready* job: queued and due
(``scheduled_at`` passed). Delayed jobs are not ready yet and reserved ones are being
worked on, so neither makes a queue stale; a reserved job whose lease expired is
counted as *stuck* instead. A queue is in breach while that age exceeds its objective.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pigeon.jobs.app import App, QueueConfig
from pigeon.jobs.rows import Breach, QueueCounts
from pigeon.jobs.store import JobStore, StatsSession
from pigeon.jobs.stores import store_for
from pigeon.logs import failure
from pigeon.storage.base import Database

log = logging.getLogger("pigeon.jobs.stats")

DEFAULT_OBJECTIVE = QueueConfig.freshness  # of a queue no App declares


@dataclass(frozen=True)
class JobQueueStats:
    """One job queue's figures (not the edge's ``pigeon.QueueStats``)."""

    queue: str
    ready: int
    delayed: int
    reserved: int  # leased and within the lease
    stuck: int  # reserved with an expired lease: a worker died or hangs
    succeeded: int
    failed: int  # in the failed store, awaiting review
    cancelled: int
    oldest_ready_age: float | None  # seconds; None when nothing is ready
    objective: float  # the queue's freshness objective, seconds
    owners: dict[str, int]  # failed jobs by owner

    @property
    def breach(self) -> bool:
        return is_breach(self.oldest_ready_age, self.objective)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "ready": self.ready,
            "delayed": self.delayed,
            "reserved": self.reserved,
            "stuck": self.stuck,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "oldest_ready_age": self.oldest_ready_age,
            "objective": self.objective,
            "breach": self.breach,
            "failed_owners": self.owners,
        }


def is_breach(oldest_ready_age: float | None, objective: float) -> bool:
    return oldest_ready_age is not None and oldest_ready_age > objective


def ready_age(oldest_ready_at: float | None, now: float) -> float | None:
    return None if oldest_ready_at is None else max(0.0, now - float(oldest_ready_at))


def _no_jobs(queue: str) -> QueueCounts:
    """The counts of a queue declared in the app that has no job yet."""
    return QueueCounts(
        queue=queue, ready=0, delayed=0, reserved=0, stuck=0, succeeded=0, failed=0,
        cancelled=0, oldest_ready_at=None,
    )  # fmt: skip


def queue_stats(
    db: Database | JobStore[StatsSession], app: App | None = None, *, now: float | None = None
) -> list[JobQueueStats]:
    """One row per queue that has jobs or is declared in ``app``, sorted by name."""
    app = app or App()
    now = time.time() if now is None else now
    with store_for(db).reading() as session:
        counts = {r["queue"]: r for r in session.queue_counts(now)}
        failed = session.failed_counts()
    owners: dict[str, dict[str, int]] = {}
    for group in failed:
        owners.setdefault(group["queue"], {})[group["owner"] or "-"] = int(group["n"])
    result = []
    for queue in sorted(counts.keys() | app.queues.keys()):
        row = counts.get(queue) or _no_jobs(queue)
        result.append(
            JobQueueStats(
                queue=queue,
                ready=int(row["ready"] or 0),
                delayed=int(row["delayed"] or 0),
                reserved=int(row["reserved"] or 0),
                stuck=int(row["stuck"] or 0),
                succeeded=int(row["succeeded"] or 0),
                failed=int(row["failed"] or 0),
                cancelled=int(row["cancelled"] or 0),
                oldest_ready_age=ready_age(row["oldest_ready_at"], now),
                objective=app.queues[queue].freshness if queue in app.queues else DEFAULT_OBJECTIVE,
                owners=owners.get(queue, {}),
            )
        )
    return result


@dataclass(frozen=True)
class RelayLag:
    """How far the outbox relay is behind: rows not yet confirmed by the broker, and the
    age of the oldest of them (None when none is waiting)."""

    pending: int
    oldest_age: float | None  # seconds

    def as_dict(self) -> dict[str, Any]:
        return {"pending": self.pending, "oldest_age": self.oldest_age}


def relay_lag(db: Database | JobStore[StatsSession], *, now: float | None = None) -> RelayLag:
    """The relay's lag, for ``/metrics``, the page and alerts: one indexed read of the
    unpublished outbox rows (a relay that is down, or a broker that refuses, shows as a
    growing age)."""
    now = time.time() if now is None else now
    with store_for(db).reading() as session:
        row = session.outbox_lag()
    return RelayLag(int(row["pending"] or 0), ready_age(row["oldest"], now))


def percentiles(samples: Sequence[float], points: Iterable[int] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., ...}`` by nearest rank: always one of the samples, never decreasing
    with p (interpolation can round a hair out of order); no samples: ``{}``."""
    if not samples:
        return {}
    ordered = sorted(samples)
    n = len(ordered)
    return {f"p{p}": float(ordered[max(0, math.ceil(p * n / 100) - 1)]) for p in points}


def service_times(
    db: Database | JobStore[StatsSession], queue: str, *, limit: int = 1000
) -> list[float]:
    """Occupied time of the latest successful attempts of ``queue``, in seconds."""
    with store_for(db).reading() as session:
        return session.service_times(queue, limit)


def failed_by_owner(
    db: Database | JobStore[StatsSession], *, recent: int = 5
) -> dict[str, dict[str, Any]]:
    """Failed jobs awaiting review, by owner: how many per queue and the latest errors."""
    with store_for(db).reading() as session:
        counts = session.failed_counts()
        latest = session.failed_recent(200)
    owners: dict[str, dict[str, Any]] = {}
    for group in counts:
        entry = owners.setdefault(group["owner"] or "-", {"failed": 0, "queues": {}, "recent": []})
        entry["failed"] += int(group["n"])
        entry["queues"][group["queue"]] = int(group["n"])
    for row in latest:
        found = owners.get(row["owner"] or "-")
        if found is not None and len(found["recent"]) < recent:
            found["recent"].append(
                {
                    "job_id": row["id"],
                    "queue": row["queue"],
                    "task": row["task"],
                    "attempts": row["attempts"],
                    "error": row["last_error"],  # opened by the store
                    "failed_at": row["finished_at"],
                    "record_id": row["record_id"],
                }
            )
    return owners


class FreshnessMonitor:
    """Fires ``app.on_freshness_breach(queue, age, objective)`` once per breach episode.

    An episode is a row in ``pigeon_freshness_breaches``: the observer whose insert
    creates it fires the hook (after its commit: at most once, even across processes and
    nodes); the row is deleted when the queue is seen fresh again, ending the episode.
    """

    def __init__(
        self,
        app: App,
        db: Database | JobStore[StatsSession],
        *,
        clock: Callable[[], float] = time.time,
    ):
        self.app = app
        self.db = db
        self.store: JobStore[StatsSession] = store_for(db)
        self.clock = clock
        self._open: set[str] = set()  # episodes this monitor has seen open
        # Queues observed at least once. An episode may have been opened by a monitor that
        # is gone (its process recycled or redeployed mid-breach): the first fresh
        # observation closes whatever is there, or its row would outlive the breach and
        # swallow the alert of every later one.
        self._seen: set[str] = set()

    def observe(self, queue: str, oldest_ready_at: float | None) -> bool:
        """Record what was seen of ``queue``; True if this call fired the alert."""
        now = self.clock()
        objective = self.app.queue_config(queue).freshness
        age = ready_age(oldest_ready_at, now)
        if not is_breach(age, objective):
            if queue in self._open or queue not in self._seen:
                with self.store.transaction() as session:
                    session.close_breach(queue)
                self._open.discard(queue)
            self._seen.add(queue)
            return False
        self._seen.add(queue)
        if queue in self._open:
            return False
        assert age is not None
        with self.store.transaction() as session:
            won = session.open_breach(queue=queue, now=now, age=age, objective=objective)
        self._open.add(queue)
        hook = self.app.on_freshness_breach
        if won and hook is not None:
            try:
                hook(queue, age, objective)
            except Exception as exc:
                failure(log, "freshness alert hook failed for queue %s", queue, exc=exc)
        return won

    def check(self, queues: Iterable[str]) -> list[str]:
        """Observe every queue now; returns those whose alert this call fired."""
        now = self.clock()
        fired = []
        for queue in queues:
            with self.store.reading() as session:
                row = session.queue_pressure(queue, now, 1)
            if self.observe(queue, None if row is None else row["oldest_ready_at"]):
                fired.append(queue)
        return fired


def open_breaches(db: Database | JobStore[StatsSession]) -> list[Breach]:
    """The breach episodes open now (queue, since, age, objective), by queue."""
    with store_for(db).reading() as session:
        return session.breaches()
