"""The workers' registry: how workers advertise the payload versions they run.

Each ``Worker`` writes a row when it starts (``pigeon_workers``: its name and origin, the
queues it serves, the payload version of every task its app declares), renews it every
``RENEW_EVERY`` seconds while it runs and deletes it when it stops. A worker that dies
without a word (SIGKILL, a lost node) stops renewing: its row counts as live for
``LIVE_FOR`` seconds, and rows older than ``FORGET_AFTER`` are deleted by the next worker
that starts.

What it is for: during a deploy that changes a task's payload, a job of a version newer
than any live worker of its queue runs *waits for a newer worker*. The claim leaves it
alone (``JobManager.known_versions``), which keeps it safe but silent; the registry lets
``pigeon.ops.queries.overview`` (the page, ``/metrics``, ``pigeon jobs stats``) count
those jobs per task against what the live workers know.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.rows import WorkerRow
from pigeon.jobs.store import JobStore, WorkerSession
from pigeon.logs import summary
from pigeon.storage import deadline

log = logging.getLogger("pigeon.jobs.worker")

RENEW_EVERY = 10.0  # seconds between a worker's renewals of its row
LIVE_FOR = 60.0  # a row renewed this recently is a live worker's
FORGET_AFTER = 24 * 3600.0  # a row not renewed for this long is deleted
WITHDRAW_WAIT = 2.0  # default wait of a stopping worker's delete: its exit is not held up


@dataclass(frozen=True)
class LiveWorker:
    """A live worker as the registry has it."""

    name: str
    origin: str
    queues: tuple[str, ...]
    versions: Mapping[str, int]  # task -> the newest payload version it runs
    started_at: float
    seen_at: float

    @classmethod
    def from_row(cls, row: WorkerRow) -> LiveWorker:
        versions = json.loads(row["versions"])
        return cls(
            name=row["name"],
            origin=row["origin"],
            queues=tuple(json.loads(row["queues"])),
            versions={str(task): int(v) for task, v in versions.items()},
            started_at=float(row["started_at"]),
            seen_at=float(row["seen_at"]),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "origin": self.origin,
            "queues": list(self.queues),
            "versions": dict(self.versions),
            "started_at": self.started_at,
            "seen_at": self.seen_at,
        }


def newest_known(workers: Iterable[LiveWorker], queue: str, task: str) -> int | None:
    """The newest payload version of ``task`` a live worker of ``queue`` runs: 0 when
    none of them knows the task (its claim leaves every job of it); None when no live
    worker serves the queue (its jobs wait for any worker, not a newer one)."""
    known = [w.versions.get(task, 0) for w in workers if queue in w.queues]
    return max(known) if known else None


def known_tasks(workers: Iterable[LiveWorker]) -> dict[str, set[str]]:
    """Per queue a live worker serves, the tasks one of its live workers knows."""
    tasks: dict[str, set[str]] = {}
    for w in workers:
        for queue in w.queues:
            tasks.setdefault(queue, set()).update(w.versions)
    return tasks


class Advert:
    """One worker's row: written by ``advertise`` (at start, then every ``RENEW_EVERY``
    seconds, when ``due``), removed by ``withdraw``. Best effort: a write that fails is
    logged and tried again at the next renewal; it never stops the worker."""

    def __init__(
        self, store: JobStore[WorkerSession], name: str, app: App, queues: Iterable[str]
    ) -> None:
        self.store = store
        self.name = name
        self.origin = f"{socket.gethostname()} pid {os.getpid()}"
        self.queues = json.dumps(sorted(queues))
        self.versions = json.dumps({t.name: t.version for t in app.tasks.values()}, sort_keys=True)
        self.started_at = time.time()
        self.renewed = float("-inf")  # monotonic, of the last write that went through

    def due(self) -> bool:
        return time.monotonic() - self.renewed >= RENEW_EVERY

    def advertise(self) -> bool:
        now = time.time()
        row = WorkerRow(
            name=self.name, origin=self.origin, queues=self.queues, versions=self.versions,
            started_at=self.started_at, seen_at=now,
        )  # fmt: skip
        try:
            with self.store.transaction() as session:
                if self.renewed == float("-inf"):  # first: clear out the long gone
                    session.forget_workers(now - FORGET_AFTER)
                session.advertise_worker(row)
        except Exception as exc:
            log.warning("could not advertise worker %s (%s)", self.name, summary(exc))
            return False
        self.renewed = time.monotonic()
        return True

    def withdraw(self, until: float | None = None) -> None:
        """Delete the row, waiting for the database no later than ``until`` (monotonic;
        by default ``WITHDRAW_WAIT`` from now): a write lock held elsewhere must not keep
        a stopping process past its supervisor's grace, which would kill it."""
        until = time.monotonic() + WITHDRAW_WAIT if until is None else until
        try:
            with deadline.waits_until(until), self.store.transaction() as session:
                session.withdraw_worker(self.name)
        except Exception as exc:  # its row ages out of the live ones within LIVE_FOR
            log.warning("could not withdraw worker %s (%s)", self.name, summary(exc))


def live_workers(store: JobStore[WorkerSession], *, now: float | None = None) -> list[LiveWorker]:
    """The workers whose rows were renewed within ``LIVE_FOR``, by name."""
    now = time.time() if now is None else now
    with store.reading() as session:
        return [LiveWorker.from_row(row) for row in session.workers_seen(now - LIVE_FOR)]


__all__ = [
    "FORGET_AFTER",
    "LIVE_FOR",
    "RENEW_EVERY",
    "Advert",
    "LiveWorker",
    "known_tasks",
    "live_workers",
    "newest_known",
]
