"""A Worker: one process's threads claiming and running jobs of its queues.

Each queue gets its own threads, so a flooded queue can occupy only its own threads and
never starves another. Their number moves within the queue's budget (``autoscale``): a
control thread grows it while jobs wait and every thread is busy, and idle threads retire
after ``keepalive`` seconds without backlog (``scaling``). The same thread runs the
maintenance: the freshness alert (``stats.FreshnessMonitor``) and the retention purge.

A separate heartbeat thread renews the leases of every job the process holds: job code
cannot block it, and a round that fails (a bug of its own, a raising ``on_stuck``) is
logged and the next one runs. The heartbeat also enforces the timeout hierarchy, waking
at each running job's timeout and supervisor deadline rather than only on its regular
ticks: a process with a job past the supervisor timeout is abandoned first thing
(``on_stuck``: in a worker process, a hard exit the supervisor replaces); a job past its
timeout is recorded as failed and retried no earlier than its lease would have run out
(and at least one heartbeat interval past its supervisor deadline), so no second runner
starts it while the process still running it may be alive: the same room the lease,
longer than the supervisor timeout, gives a job whose process is killed.

Whatever a task raises, ``BaseException`` included (``SystemExit`` from a library's
``sys.exit()``, even a ``KeyboardInterrupt`` it raises itself: a real Ctrl-C reaches the
main thread, never a task's), is that job's error outcome, and its thread carries on
with the batch. A batch that ends abnormally (a bug in the worker itself) releases the
jobs it did not run; its thread logs it and goes on claiming.

An idle queue thread sleeps until its queue is woken (NOTIFY on PostgreSQL, see
``wakeup``) or its polling back-off runs out. When the database goes away, claims and
lease renewals fail and are retried; an outcome that cannot be recorded within the lease
is dropped, and the job is claimed again once its lease has expired: never lost, and its
effects, being claims, never doubled. A job of a batch whose lease the renewals did not
keep ahead is not started before one renewal of its own gets through.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from pigeon.exceptions import ConfigurationError, JobTimeout, NotFound, PermanentError
from pigeon.jobs.app import App
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.context import JobContext
from pigeon.jobs.held import LEFT_RUNNING, Held, WorkerStats, confirm_lease, rss_mib
from pigeon.jobs.job import Job
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.options import WorkerOptions, from_legacy_keywords
from pigeon.jobs.retention import purge_finished, purge_ticks
from pigeon.jobs.scaling import Scaler
from pigeon.jobs.schedule import Scheduler
from pigeon.jobs.stats import FreshnessMonitor
from pigeon.jobs.store import JobStore
from pigeon.jobs.stores import store_for
from pigeon.jobs.timeouts import Timeouts
from pigeon.logs import summary
from pigeon.storage.base import Database

log = logging.getLogger("pigeon.jobs.worker")
T = TypeVar("T")

STOPPED = 0
RECYCLE = 3  # exit code asking the supervisor for a fresh process
STUCK = 70


class Worker:
    def __init__(
        self,
        app: App,
        db: Database | JobStore,
        queues: Mapping[str, int | Budget],
        options: WorkerOptions | None = None,
        *,
        name: str | None = None,
        on_stuck: Callable[[], None] | None = None,
        **legacy: Any,
    ) -> None:
        """``options``: how it claims, polls, recycles and maintains (``WorkerOptions``).
        The keyword arguments it took before (``batch=``, ``poll=``, ...) still work for
        this release, with a DeprecationWarning."""
        if legacy:
            warnings.warn(
                f"Worker({', '.join(f'{k}=' for k in sorted(legacy))}) is deprecated: "
                "pass options=WorkerOptions(...)",
                DeprecationWarning,
                stacklevel=2,
            )
            options = from_legacy_keywords(options, legacy)
        self.options = options = options or WorkerOptions()
        self.app = app
        self.db = db
        self.store = store_for(db)
        # This process's share of each queue's budget: a bare number is a maximum, with
        # the queue's minimum (capped by it) as the floor; a maximum above the queue's
        # max_workers is refused (ConfigurationError), as the supervisor refuses it. The
        # supervisor checks the shares of all its processes against the App's budget.
        self.queues: dict[str, Budget] = {}
        for queue, spec in queues.items():
            config = app.queue_config(queue)
            if isinstance(spec, int):
                if spec < 1:
                    continue
                spec = Budget(min(config.min_workers, spec), spec)
            self.queues[queue] = config.budget(spec)
        if not self.queues:
            raise ConfigurationError(f"a worker needs at least one queue thread, got {queues}")
        self.name = name or f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.recycle_jobs = options.recycle_jobs
        self.recycle_mib = options.recycle_mib
        # Polling backs off from ``poll`` to ``poll_max`` while a queue stays empty; on
        # PostgreSQL a NOTIFY wakes the queue's threads at once, polling is the fallback.
        self.poll = options.poll
        self.poll_max = options.poll_max
        self.batch = batch = options.batch
        self.schedules = options.schedules
        self.on_stuck = on_stuck
        self.keepalive = options.keepalive
        self.control_every = options.control_every
        self.maintenance = options.maintenance
        self.purge_every = options.purge_every
        self.manager = JobManager(self.store, app)
        self.stats = WorkerStats()
        self.exit_code = STOPPED
        self._stop = threading.Event()
        # Keyed by (job, lease token): after a lease expires, another thread of this very
        # process may hold the same job under a new token.
        self._held: dict[tuple[int, str], Held] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._interval = 0.05  # the heartbeat's, set when it starts
        self.scaler = Scaler(
            self.queues,
            lambda queue, label: self._spawn(label, self._loop, queue),
            self._wake,
            batch={q: batch or app.queue_config(q).batch for q in self.queues},
            keepalive=options.keepalive,
        )
        self.monitor = FreshnessMonitor(app, self.store)
        self.wakeup = self.store.wakeup(self.queues)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self.wakeup.start()
        for queue, budget in self.queues.items():
            self.scaler.resize(queue, budget.min)
        self._spawn("heartbeat", self._heartbeat)
        self._spawn("control", self._control)
        if self.schedules and self.app.schedules:
            self._spawn("scheduler", Scheduler(self.app, self.store).run, self._stop)

    def _spawn(self, label: str, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=f"pigeon-{label}", daemon=True)
        thread.start()
        with self._lock:  # retired threads leave the list, so scaling never grows it
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def stop(self, code: int = STOPPED) -> None:
        """Graceful: stop claiming; running jobs finish, claimed-but-unstarted are released."""
        if not self._stop.is_set():
            self.exit_code = code
            self._stop.set()
            self.wakeup.wake_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def join(self, grace: float | None = None) -> bool:
        """Wait for the job threads; False if some job was still running after ``grace``."""
        deadline = None if grace is None else time.monotonic() + grace
        for thread in list(self._threads):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        done = not any(t.is_alive() for t in list(self._threads))
        if done:
            self.wakeup.close()
        return done

    def run(self, grace: float | None = None) -> int:
        self.start()
        self._stop.wait()
        if grace is None:
            grace = max(c.timeouts.job for c in map(self.app.queue_config, self.queues))
        if not self.join(grace):  # the process exits anyway: say what it leaves behind
            with self._lock:
                running = sorted(h.job.id for h in self._held.values() if h.started)
            log.warning(LEFT_RUNNING, self.name, running, grace)
        return self.exit_code

    # -- the claim loop ----------------------------------------------------------------

    def _loop(self, queue: str) -> None:
        try:
            self._claim_loop(queue)
        except BaseException:
            # Not expected (batches and tasks are contained): keep the scaler's count of
            # live threads true with a replacement.
            if not self._stop.is_set():
                log.exception("claim thread of %s died; replacing it", queue)
                self._spawn(f"{queue}-replacement", self._loop, queue)
            raise

    def _claim_loop(self, queue: str) -> None:
        config = self.app.queue_config(queue)
        lease = config.timeouts.lease_seconds
        batch = self.batch or config.batch
        idle = self.poll
        while not self._stop.is_set() and not self.scaler.retire(queue):
            seen = self.wakeup.generation(queue)
            asked = time.monotonic()  # the leases run at least until asked + lease
            try:
                jobs = self.manager.lease_jobs(queue, self.name, batch, lease)
            except Exception as exc:
                log.warning("claim on %s failed (%s); retrying", queue, summary(exc))
                self._stop.wait(min(1.0, lease / 4))
                continue
            if not jobs:
                self.wakeup.wait(queue, seen, idle)
                idle = min(idle * 2, self.poll_max)
                continue
            idle = self.poll
            try:
                with self.scaler.busy(queue):
                    self._run_batch(queue, jobs, asked + lease)
            except Exception:
                log.exception("a batch of %s ended abnormally; its unrun jobs were released", queue)
                self._stop.wait(min(1.0, lease / 4))
            self._maybe_recycle()

    def _run_batch(self, queue: str, jobs: list[Job], lease_end: float) -> None:
        with self._lock:
            self.stats.claimed += len(jobs)
            for job in jobs:
                self._held[job.id, job.token] = Held(job, lease_end=lease_end)
        outcomes: list[AttemptOutcome] = []
        flushed = time.monotonic()
        ran = 0  # jobs[:ran] ran; a job whose _execute raised counts as not run
        try:
            while ran < len(jobs) and not self._stop.is_set():
                outcome = self._execute(jobs[ran])
                ran += 1
                if outcome is not None:
                    outcomes.append(outcome)
                # Batched completions, but never sit on results for long.
                if time.monotonic() - flushed > 0.2:
                    pending, outcomes, flushed = outcomes, [], time.monotonic()
                    self._flush(pending)
        finally:
            # Stopping, or ending abnormally: record what ran, give back what did not.
            try:
                pending, outcomes = outcomes, []
                self._flush(pending)
                rest = jobs[ran:]
                if rest:
                    released = self._persist(rest, functools.partial(self.manager.release, rest))
                    with self._lock:
                        self.stats.released += released or 0
            finally:
                self._forget(jobs)  # nothing of this batch stays held (and renewed)
                with self._lock:
                    self.stats.by_queue[queue] = self.stats.by_queue.get(queue, 0) + len(jobs)

    def _execute(self, job: Job) -> AttemptOutcome | None:
        config = self.app.queue_config(job.queue)
        with self._lock:
            held = self._held.get((job.id, job.token))
        # Renewals keep lease_end a lease ahead; within one heartbeat of it they are not
        # getting through (or the process was paused): confirm the lease before starting.
        if held is not None and time.monotonic() >= held.lease_end - self._interval:
            lease_end = confirm_lease(self.manager, job, config.timeouts.lease_seconds)
            with self._lock:
                held.lost, held.lease_end = lease_end is None or held.lost, lease_end or 0.0
        with self._lock:
            if held is None or held.lost:
                # Never start a job whose lease is gone: its rescuer runs it.
                self._held.pop((job.id, job.token), None)
                self.stats.lost += 1
                return None
            held.started = time.monotonic()
            job.started_at = self.manager.clock()  # the attempt's occupied time starts here
        error: BaseException | None = None
        try:
            task = self.app.get_task(job.task)
        except NotFound as exc:
            task, error = None, PermanentError(str(exc))
        if task is not None:
            try:
                task.before_run(self.store, job)  # declared fields, the access re-check
                if task.context:
                    # Effects are SQL: a context task's database is the one the worker was
                    # given (with the in-memory store, the store itself: no effects).
                    db = cast(Database, self.db)
                    task.func(JobContext(job, db, config.timeouts), **job.payload)
                else:
                    task.func(**job.payload)
            except BaseException as exc:  # SystemExit too: this job's error, not the thread's
                error = exc
        with self._lock:
            if held.timed_out:
                # Already recorded by the heartbeat; the lease is gone.
                self._held.pop((job.id, job.token), None)
                return None
            # Finished: the timeout check leaves it alone while its outcome is buffered.
            held.done = True
        return AttemptOutcome(job, error)

    def _persist(self, jobs: list[Job], write: Callable[[], T]) -> T | None:
        """Run a write about held jobs, retrying while the database is away. Past the
        shortest of their leases the jobs may have been rescued: give up, and leave them
        to be recovered after lease expiry (their effects are claims, so never doubled)."""
        lease = min(self.app.queue_config(j.queue).timeouts.lease_seconds for j in jobs)
        give_up = time.monotonic() + lease
        delay = 0.05
        while True:
            try:
                return write()
            except Exception as exc:
                if time.monotonic() + delay > give_up:
                    log.warning(
                        "could not record %d jobs (%s); they are recovered after lease expiry",
                        len(jobs),
                        summary(exc),
                    )
                    with self._lock:
                        self.stats.unrecorded += len(jobs)
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _flush(self, outcomes: list[AttemptOutcome]) -> None:
        if not outcomes:
            return
        jobs = [o.job for o in outcomes]
        results = self._persist(jobs, functools.partial(self.manager.finish, outcomes))
        if results is None:
            self._forget(jobs)
            return
        with self._lock:
            for outcome, ok in zip(outcomes, results, strict=True):
                if not ok:
                    self.stats.lost += 1
                elif outcome.error is None:
                    self.stats.succeeded += 1
                else:
                    self.stats.failed += 1
        self._forget([o.job for o in outcomes])

    def _forget(self, jobs: list[Job]) -> None:
        with self._lock:
            for job in jobs:
                self._held.pop((job.id, job.token), None)

    def _maybe_recycle(self) -> None:
        by_count = self.recycle_jobs is not None and self.stats.claimed >= self.recycle_jobs
        by_memory = self.recycle_mib is not None and rss_mib() >= self.recycle_mib
        if by_count or by_memory:
            self.stop(RECYCLE)

    # -- budgets and maintenance --------------------------------------------------------

    def _wake(self, queue: str) -> None:
        self.wakeup.wake(queue)

    def threads(self, queue: str) -> int:
        """Live claim threads of ``queue`` in this process."""
        return self.scaler.threads(queue)

    def _control(self) -> None:
        """A few times a second: each queue's backlog sizes its threads and is checked
        against its freshness objective; now and then finished jobs are purged."""
        last_purge = time.monotonic()
        while not self._stop.wait(self.control_every):
            for queue in self.queues:
                try:
                    backlog, oldest = self.manager.pressure(queue, self.scaler.cap(queue))
                    self.scaler.observe(queue, backlog)
                    if self.maintenance:
                        self.monitor.observe(queue, oldest)
                except Exception as exc:
                    log.warning("checking queue %s failed (%s)", queue, summary(exc))
            retention = self.app.retention
            if self.maintenance and retention and time.monotonic() - last_purge > self.purge_every:
                last_purge = time.monotonic()
                try:
                    self.stats.purged += purge_finished(self.store, retention, max_batches=20)
                    purge_ticks(self.store, self.app.schedules.values(), retention, max_batches=20)
                except Exception as exc:
                    log.warning("purging finished jobs failed (%s)", summary(exc))

    # -- heartbeat and timeouts ----------------------------------------------------------

    def _heartbeat(self) -> None:
        configs = [self.app.queue_config(q) for q in self.queues]
        lease = min(c.timeouts.lease_seconds for c in configs)
        interval = max(0.05, min(lease / 4, min(c.timeouts.job for c in configs) / 4))
        self._interval = interval
        while not self._threads_done():
            try:
                next_deadline = self._beat()
            except Exception:
                # The heartbeat must outlive any bug of its own: without it no lease is
                # renewed, and every job this process runs is run again by whoever
                # rescues it. The next round tries again.
                log.exception("heartbeat of worker %s failed; going on", self.name)
                with self._lock:
                    self.stats.heartbeat_errors += 1
                next_deadline = float("inf")
            # Wake at the next timeout or supervisor deadline (just past it: the checks
            # are strict), not up to an interval late. Once stopping, poll briefly: we
            # only wait for the job threads to drain.
            wait = min(interval, max(0.0, next_deadline - time.monotonic()) + 0.005)
            if self._stop.wait(wait):
                time.sleep(0.02)

    def _beat(self) -> float:
        """One round: the timeout checks, then every held lease renewed; returns the next
        deadline (monotonic) of a running job."""
        next_deadline = self._check_timeouts()
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
        return next_deadline

    def _threads_done(self) -> bool:
        if not self._stop.is_set():
            return False
        current = threading.current_thread()
        return not any(t.is_alive() for t in list(self._threads) if t is not current)

    def _check_timeouts(self, now: float | None = None) -> float:
        """Abandon the process if a job is past its supervisor deadline, record the jobs
        past their timeout; returns the next deadline (monotonic) of a running job."""
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
        if stuck:  # before any database write, which could make it late
            log.error("a job overran its supervisor timeout; abandoning worker %s", self.name)
            try:
                if self.on_stuck is not None:
                    self.on_stuck()
            except BaseException:  # sys.exit() here would end only this thread
                log.exception("on_stuck of worker %s failed; stopping it", self.name)
            self.stop(STUCK)
        if expired:
            # Retried while the database is away; given up (logged, counted) past the lease,
            # when the jobs are recovered by lease expiry like any unrecorded outcome.
            self._persist([o.job for o in expired], lambda: self.manager.finish(expired))
        return next_deadline

    def _retry_delay(self, timeouts: Timeouts) -> float:
        """Seconds from a timed-out attempt's start to its retry: past the supervisor
        deadline by at least one heartbeat interval (the process is abandoned by then),
        and never before its lease would have run out."""
        return max(timeouts.lease_seconds, timeouts.supervisor_seconds + self._interval)
