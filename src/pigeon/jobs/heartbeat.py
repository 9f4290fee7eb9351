"""A worker's heartbeat: the thread that renews the leases of every job its process
holds and enforces the timeout hierarchy (``Worker``'s, in a mixin of its own).

Job code cannot block it, and a round that fails (a bug of its own, a raising
``on_stuck``) is logged and the next one runs. The deadlines are kept by a watchdog
thread of their own, which never touches the database: a renewal or a write held by an
outage must not delay them, since the lease runs out meanwhile. It wakes at each running
job's timeout and supervisor deadline rather than only on its regular ticks: a process
with a job past the supervisor timeout is abandoned first thing (``on_stuck``); a job past
its timeout is marked, then recorded as failed by the heartbeat and retried no earlier
than its lease would have run out.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pigeon.exceptions import JobTimeout
from pigeon.jobs.app import App
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.held import Held, WorkerStats
from pigeon.jobs.job import Job
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.timeouts import Timeouts
from pigeon.logs import summary
from pigeon.orphans import parent_gone

log = logging.getLogger("pigeon.jobs.worker")
T = TypeVar("T")

STUCK = 70
# Seconds a job taken from the prefetch buffer runs before the heartbeat writes its
# started marker: a job that ends sooner never costs a write of its own, and one that runs
# on counts as waiting at most this long (the claim marks its first job itself).
MARK_AFTER = 0.1
_HEARTBEAT, _WATCHDOG = "pigeon-heartbeat", "pigeon-watchdog"  # the thread names


class Heartbeat:
    """The heartbeat half of ``Worker``: what it uses of the worker is declared here."""

    app: App
    queues: dict[str, Budget]
    manager: JobManager
    name: str
    stats: WorkerStats
    on_stuck: Callable[[], None] | None
    parent: int | None  # the supervisor's pid: once it is gone, stop (pigeon.orphans)
    _held: dict[tuple[int, str], Held]
    _lock: threading.Lock
    _stop: threading.Event
    _threads: list[threading.Thread]
    _interval: float
    _expired: list[AttemptOutcome]  # timed out, for the heartbeat to record

    def stop(self, code: int = 0) -> None:
        raise NotImplementedError

    def _persist(self, jobs: list[Job], write: Callable[[], T]) -> T | None:
        raise NotImplementedError

    def _record(self, outcomes: list[AttemptOutcome]) -> None:
        """Write ``outcomes`` (``_persist``) and count each by the answer: recorded,
        fenced (lost), or given up (unrecorded, counted by ``_persist``)."""
        recorded = self._persist([o.job for o in outcomes], lambda: self.manager.finish(outcomes))
        if recorded is not None:
            with self._lock:
                self.stats.count_recorded(outcomes, recorded)

    def _intervals(self) -> float:
        configs = [self.app.queue_config(q) for q in self.queues]
        lease = min(c.timeouts.lease_seconds for c in configs)
        return max(0.05, min(lease / 4, min(c.timeouts.job for c in configs) / 4))

    def _heartbeat(self) -> None:
        """Renew the leases, write the started markers and the timed-out outcomes; once the
        job threads are done, the outcomes handed over since the last round too (a round
        stuck in a renewal while the worker stopped had ended with them in hand, neither
        recorded nor counted)."""
        self._interval = self._intervals()
        self._rounds("heartbeat", self._beat)
        self._record_expired()

    def _record_expired(self) -> None:
        """Write the timed-out outcomes the watchdog handed over. Retried while the
        database is away; given up (logged, counted) past the lease, when the jobs are
        recovered by lease expiry like any unrecorded outcome."""
        with self._lock:
            expired, self._expired = self._expired, []
        if expired:
            self._record(expired)

    def _watchdog(self) -> None:
        """The deadlines and the supervisor's presence, checked in memory only."""
        self._rounds("deadline check", self._check_timeouts, before=self._check_parent)

    def _rounds(
        self, what: str, step: Callable[[], float], before: Callable[[], None] = lambda: None
    ) -> None:
        """``before`` then ``step`` until the job threads are done, each round woken just
        past the time ``step`` returns (monotonic; the checks are strict) or after an
        interval. A round that fails is logged and counted, and the next one runs: the
        heartbeat must outlive any bug of its own, or no lease is renewed and every job
        this process runs is run again by whoever rescues it."""
        interval = self._intervals()
        while not self._threads_done():
            before()
            try:
                next_due = step()
            except Exception:
                log.exception("%s of worker %s failed; going on", what, self.name)
                with self._lock:
                    self.stats.heartbeat_errors += 1
                next_due = float("inf")
            wait = min(interval, max(0.0, next_due - time.monotonic()) + 0.005)
            if self._stop.wait(wait):  # stopping: we only wait for the job threads
                time.sleep(0.02)

    def _check_parent(self) -> None:
        """An orphan stops: no more claims; running jobs finish, the others go back. Where
        the kernel sends no signal when the supervisor dies (pigeon.orphans), this is what
        keeps a worker from claiming on with no one to replace or stop it."""
        if self.parent is None or self._stop.is_set() or not parent_gone(self.parent):
            return
        log.warning(
            "worker %s: its supervisor (pid %d) is gone; stopping, its jobs finish or go back",
            self.name,
            self.parent,
        )
        self.stop()

    def _beat(self) -> float:
        """One round: the timed-out outcomes, the started markers due, then every held
        lease renewed; returns when the next marker is due (monotonic)."""
        self._record_expired()
        next_due = self._mark_started()
        with self._lock:
            held = [h.job for h in self._held.values() if not h.timed_out]
        by_lease: dict[float, list[Job]] = {}
        for job in held:
            by_lease.setdefault(self.app.queue_config(job.queue).timeouts.lease_seconds, [])
            by_lease[self.app.queue_config(job.queue).timeouts.lease_seconds].append(job)
        for seconds, jobs in by_lease.items():
            asked = time.monotonic()
            try:
                lost = self.manager.renew(jobs, seconds)
            except Exception as exc:
                log.warning("renewing %d leases failed (%s)", len(jobs), summary(exc))
                continue
            gone = {(job.id, job.token) for job in lost}
            with self._lock:
                for job in jobs:
                    held_job = self._held.get((job.id, job.token))
                    if held_job is None:
                        continue
                    if (job.id, job.token) in gone:
                        held_job.lost = True
                    else:
                        held_job.lease_end = asked + seconds
        return next_due

    def _mark_started(self) -> float:
        """Write the started markers of the jobs running ``MARK_AFTER`` seconds without
        one, in one transaction; returns when the next is due (monotonic)."""
        now = time.monotonic()
        with self._lock:
            waiting = [h for h in self._held.values() if h.started and not h.done and not h.marked]
        due = [h for h in waiting if now - h.started >= MARK_AFTER]
        later = [h.started + MARK_AFTER for h in waiting if now - h.started < MARK_AFTER]
        if due:
            try:
                held = self.manager.start_jobs([h.job for h in due])
            except Exception as exc:  # the next round tries again
                log.warning("writing %d started markers failed (%s)", len(due), summary(exc))
                return now + MARK_AFTER
            with self._lock:
                for h in due:
                    h.marked = True
                    h.lost = h.lost or h.job.id not in held
        return min(later, default=math.inf)

    def _threads_done(self) -> bool:
        """Stopping, and every thread but the heartbeat and the watchdog has ended."""
        if not self._stop.is_set():
            return False
        keepers = (_HEARTBEAT, _WATCHDOG)
        return not any(t.is_alive() for t in list(self._threads) if t.name not in keepers)

    def _check_timeouts(self, now: float | None = None) -> float:
        """Abandon the process if a job is past its supervisor deadline, hand the jobs
        past their timeout to the heartbeat; returns the next deadline (monotonic) of a
        running job. No database call here: an outage must not make a deadline late."""
        now = time.monotonic() if now is None else now
        expired: list[AttemptOutcome] = []
        stuck = False
        next_deadline = float("inf")
        with self._lock:
            for held in self._held.values():
                if not held.started or held.done:
                    continue
                timeouts = self.app.queue_config(held.job.queue).timeouts
                elapsed = now - held.started
                if elapsed > timeouts.supervisor_seconds:
                    stuck = True
                else:
                    next_deadline = min(next_deadline, held.started + timeouts.supervisor_seconds)
                if not held.timed_out:
                    next_deadline = min(next_deadline, held.started + timeouts.job)
                if elapsed > timeouts.job and not held.timed_out:
                    held.timed_out = True
                    self.stats.timed_out += 1
                    wall_start = time.time() - elapsed
                    expired.append(
                        AttemptOutcome(
                            held.job,
                            JobTimeout(
                                f"job {held.job.id} ({held.job.task}) ran {elapsed:.1f}s, "
                                f"over its {timeouts.job:g}s timeout"
                            ),
                            not_before=wall_start + self._retry_delay(timeouts),
                        )
                    )
        if stuck:
            log.error("a job overran its supervisor timeout; abandoning worker %s", self.name)
            try:
                if self.on_stuck is not None:
                    self.on_stuck()
            except BaseException:  # sys.exit() here would end only this thread
                log.exception("on_stuck of worker %s failed; stopping it", self.name)
            self.stop(STUCK)
        if expired:
            with self._lock:
                self._expired.extend(expired)
        return next_deadline

    def _retry_delay(self, timeouts: Timeouts) -> float:
        """Seconds from a timed-out attempt's start to its retry: past the supervisor
        deadline by at least one heartbeat interval (the process is abandoned by then),
        and never before its lease would have run out."""
        return max(timeouts.lease_seconds, timeouts.supervisor_seconds + self._interval)
