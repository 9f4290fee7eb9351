"""A Worker: one process's threads claiming and running jobs of its queues.

Each queue gets its own threads, so a flooded queue can occupy only its own threads and
never starves another. Their number moves within the queue's budget (``autoscale``): a
control thread grows it while jobs wait and every thread is busy, and idle threads retire
after ``keepalive`` seconds without backlog (``scaling``). The same thread runs the
maintenance: the freshness alert (``stats.FreshnessMonitor``) and the retention purge.

A separate heartbeat thread renews the leases of every job the process holds: job code
cannot block it, and a round that fails (a bug of its own, a raising ``on_stuck``) is
logged and the next one runs. A watchdog thread beside it, which never waits on the
database, enforces the timeout hierarchy, waking at each running job's timeout and
supervisor deadline rather than only on its regular ticks: a process with a job past the
supervisor timeout is abandoned first thing (``on_stuck``: in a worker process, a hard
exit the supervisor replaces); a job past its timeout is recorded as failed and retried
no earlier than its lease would have run out (and at least one heartbeat interval past
its supervisor deadline), so no second runner starts it while the process still running
it may be alive: the same room the lease, longer than the supervisor timeout, gives a job
whose process is killed.

A queue's threads claim only what its free threads can start now (``prefetch``: by
default one job per free thread, at most ``batch`` per round trip): a thread with nothing
to run claims for the free ones, starts the first job itself and leaves the others to
them. A job claimed but not started still counts as waiting (its started marker is
written with the claim for the first, by the heartbeat for the others once they have run
``heartbeat.MARK_AFTER``), so a busy queue never hides its backlog in leases.
``recycle_jobs`` counts started jobs: after exactly that many the process stops claiming
and gives back what it holds unstarted.

Whatever a task raises, ``BaseException`` included (``SystemExit`` from a library's
``sys.exit()``, even a ``KeyboardInterrupt`` it raises itself: a real Ctrl-C reaches the
main thread, never a task's), is that job's error outcome, and its thread carries on.
A job whose run ends abnormally (a bug in the worker itself) is released; its thread
logs it and goes on claiming.

An idle queue thread sleeps until its queue is woken (NOTIFY on PostgreSQL, see
``wakeup``) or its polling back-off runs out. When the database goes away, claims and
lease renewals fail and are retried; a running job's waits on it end by the job's timeout
(``storage.deadline``: it fails with ``JobTimeout`` in its own thread, never held until
the watchdog abandons the process); an outcome that cannot be recorded within the lease
(each try's waits bounded by it too) is dropped, and the job is claimed again once its
lease has expired: never lost, and its effects, being claims, never doubled. A claimed
job whose lease the renewals did not keep ahead is not started before one renewal of its
own gets through.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from pigeon.exceptions import ConfigurationError, JobTimeout, NotFound, PermanentError
from pigeon.jobs.app import App
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.context import JobContext
from pigeon.jobs.heartbeat import STUCK as STUCK  # the exit code of an abandoned process
from pigeon.jobs.heartbeat import Heartbeat
from pigeon.jobs.held import LEFT_RUNNING, Held, WorkerStats, confirm_lease, rss_mib
from pigeon.jobs.job import Job
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.prefetch import Prefetched, claim_size
from pigeon.jobs.registry import Advert
from pigeon.jobs.retention import purge_finished, purge_ticks
from pigeon.jobs.scaling import Scaler
from pigeon.jobs.schedule import Scheduler
from pigeon.jobs.stats import FreshnessMonitor
from pigeon.jobs.stores import BuiltinStore, store_for
from pigeon.jobs.timeouts import Timeouts
from pigeon.logs import summary
from pigeon.storage import deadline
from pigeon.storage.base import Database

log = logging.getLogger("pigeon.jobs.worker")
T = TypeVar("T")

STOPPED = 0
RECYCLE = 3  # exit code asking the supervisor for a fresh process
EXIT_MARGIN = 1.0  # a stopping worker is gone this long before its supervisor kills it


class Worker(Heartbeat):
    def __init__(
        self,
        app: App,
        db: Database | BuiltinStore,
        queues: Mapping[str, int | Budget],
        options: WorkerOptions | None = None,
        *,
        name: str | None = None,
        on_stuck: Callable[[], None] | None = None,
        parent: int | None = None,
    ) -> None:
        """``options``: how it claims, polls, recycles and maintains (``WorkerOptions``).
        ``parent``: the pid of the process it must not outlive (its supervisor): once this
        process has another parent, it stops as on SIGTERM (``heartbeat``)."""
        self.options = options = options or WorkerOptions()
        self.app = app
        self.db = db
        self.store: BuiltinStore = store_for(db)
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
        self.batch = options.batch
        self.prefetch = options.prefetch
        self.schedules = options.schedules
        self.on_stuck = on_stuck
        self.parent = parent
        self.keepalive = options.keepalive
        self.control_every = options.control_every
        self.maintenance = options.maintenance
        self.purge_every = options.purge_every
        self.manager = JobManager(self.store, app, runs_tasks=True)
        self.stats = WorkerStats()
        self.exit_code = STOPPED
        self._stop = threading.Event()
        # Keyed by (job, lease token): after a lease expires, another thread of this very
        # process may hold the same job under a new token.
        self._held: dict[tuple[int, str], Held] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._interval = 0.05  # the heartbeat's, set when it starts
        self._expired: list[AttemptOutcome] = []
        self.drained = False  # set by join: every thread ended, none left using the db
        self._exit_by: float | None = None  # set by run: when a stopping process is gone
        self.scaler = Scaler(
            self.queues,
            lambda queue, label: self._spawn(label, self._loop, queue),
            self._wake,
            batch=dict.fromkeys(self.queues, options.prefetch),  # each thread's share
            keepalive=options.keepalive,
        )
        self.prefetched = {queue: Prefetched() for queue in self.queues}
        self.monitor = FreshnessMonitor(app, self.store)
        self.wakeup = self.store.wakeup(self.queues)
        # This worker's row in the registry: the payload versions it runs (registry.py).
        self.advert = Advert(self.store, self.name, app, self.queues)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self.advert.advertise()
        self.wakeup.start()
        for queue, budget in self.queues.items():
            self.scaler.resize(queue, budget.min)
        self._spawn("heartbeat", self._heartbeat)
        self._spawn("watchdog", self._watchdog)
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
        self.drained = not any(t.is_alive() for t in list(self._threads))
        if self.drained:
            self.wakeup.close()
            self.advert.withdraw(self._exit_by)
        return self.drained

    def run(self, grace: float | None = None) -> int:
        """Run until stopped, then drain for up to ``grace`` (default: the longest job
        timeout) and leave by the longest lease, the supervisor's grace before SIGKILL."""
        self.start()
        self._stop.wait()
        configs = [self.app.queue_config(q) for q in self.queues]
        if grace is None:
            grace = max(c.timeouts.job for c in configs)
        lease = max(c.timeouts.lease_seconds for c in configs)
        self._exit_by = time.monotonic() + max(grace, lease - EXIT_MARGIN)
        if not self.join(grace):  # the process exits anyway: say what it leaves behind
            with self._lock:
                running = sorted(h.job.id for h in self._held.values() if h.started)
            log.warning(LEFT_RUNNING, self.name, running, grace)
            self.advert.withdraw(self._exit_by)
        return self.exit_code

    # -- the claim loop ----------------------------------------------------------------

    def _loop(self, queue: str) -> None:
        try:
            self._claim_loop(queue)
        except BaseException:
            # Not expected (jobs and tasks are contained): keep the scaler's count of
            # live threads true with a replacement.
            if not self._stop.is_set():
                log.exception("claim thread of %s died; replacing it", queue)
                self._spawn(f"{queue}-replacement", self._loop, queue)
            raise

    def _claim_loop(self, queue: str) -> None:
        """Run the queue's jobs one at a time: the next one claimed for this thread by
        another, else one claimed now (``_claim``). Outcomes are recorded in batches, but
        never held for long, nor while the thread looks for work."""
        lease = self.app.queue_config(queue).timeouts.lease_seconds
        prefetched = self.prefetched[queue]
        idle = self.poll
        outcomes: list[AttemptOutcome] = []
        flushed = time.monotonic()
        try:
            while not self._stop.is_set():
                job = prefetched.take()
                if job is None:
                    pending, outcomes, flushed = outcomes, [], time.monotonic()
                    self._flush(pending)
                    if self.scaler.retire(queue):
                        return
                    seen = self.wakeup.generation(queue)
                    job = self._claim(queue, lease)
                    if job is None:
                        self.wakeup.wait(queue, seen, idle)
                        idle = min(idle * 2, self.poll_max)
                        continue
                idle = self.poll
                outcome = self._run_one(queue, job, lease)
                if outcome is not None:
                    outcomes.append(outcome)
                if time.monotonic() - flushed > 0.2:
                    pending, outcomes, flushed = outcomes, [], time.monotonic()
                    self._flush(pending)
                self._maybe_recycle()
        finally:
            self._flush(outcomes)
            if self._stop.is_set():  # stopping: what no thread will start goes back
                self._release(prefetched.drain())

    def _claim(self, queue: str, lease: float) -> Job | None:
        """Claim for the queue's free threads (``prefetch.claim_size``): the first job
        is this thread's, started with the claim; the rest wait in the queue's buffer,
        claimed, not started, and the other threads are woken to take them."""
        prefetched = self.prefetched[queue]
        batch = self.batch or self.app.queue_config(queue).batch
        with prefetched.claiming:
            free = max(1, self.scaler.free(queue))  # this thread is free, whatever the count
            n = claim_size(batch=batch, prefetch=self.prefetch, free=free, buffered=len(prefetched))
            if n == 0:  # another thread claimed for the free threads meanwhile
                return prefetched.take()
            asked = time.monotonic()  # the leases run at least until asked + lease
            try:
                jobs = self.manager.lease_jobs(queue, self.name, n, lease, start=1)
            except Exception as exc:
                log.warning("claim on %s failed (%s); retrying", queue, summary(exc))
                self._stop.wait(min(1.0, lease / 4))
                return None
            with self._lock:
                self.stats.claimed += len(jobs)
                for i, job in enumerate(jobs):  # the first was marked started by the claim
                    self._held[job.id, job.token] = Held(
                        job, lease_end=asked + lease, marked=i == 0
                    )
            prefetched.put(jobs[1:])
        if len(jobs) > 1:
            self.wakeup.wake(queue)
        return jobs[0] if jobs else None

    def _run_one(self, queue: str, job: Job, lease: float) -> AttemptOutcome | None:
        """Run one held job; a worker bug releases it (never dropped while held)."""
        try:
            with self.scaler.busy(queue):
                return self._execute(job)
        except Exception:
            log.exception("running job %s of %s ended abnormally; it was released", job.id, queue)
            self._release([job])
            self._stop.wait(min(1.0, lease / 4))
            return None
        finally:
            with self._lock:
                self.stats.by_queue[queue] = self.stats.by_queue.get(queue, 0) + 1

    def _release(self, jobs: list[Job]) -> None:
        """Give held jobs back, not started: ready at once, their attempt refunded."""
        if jobs:
            try:
                released = self._persist(jobs, functools.partial(self.manager.release, jobs))
                with self._lock:
                    self.stats.released += released or 0
            finally:
                self._forget(jobs)  # no longer held (and renewed)

    def _begin(self, job: Job, held: Held | None) -> str:
        """May ``job`` start now? "run" (counted as started), "lost" (its lease is gone:
        its rescuer runs it) or "release" (stopping, or the recycle count is reached: it
        goes back not started). Under the lock: ``recycle_jobs`` is exact across threads."""
        with self._lock:
            if held is None or held.lost:
                self._held.pop((job.id, job.token), None)
                self.stats.lost += 1
                return "lost"
            if self._stop.is_set():
                return "release"
            if self.recycle_jobs is not None and self.stats.started >= self.recycle_jobs:
                return "release"
            self.stats.started += 1
            last = self.recycle_jobs is not None and self.stats.started >= self.recycle_jobs
        if last:  # this job is the last this process starts: no more claims
            self.stop(RECYCLE)
        return "run"

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
        verdict = "release" if self._too_new(job) else self._begin(job, held)
        if verdict == "release":
            self._release([job])  # marked started or not: queued again
        if verdict != "run":
            return None
        assert held is not None
        with self._lock:
            held.started = time.monotonic()
            job.started_at = self.manager.clock()  # the attempt's occupied time starts here
        # Every database wait of the work ends by the job's timeout (JobTimeout), so a job
        # whose database is away ends here, not as a process the watchdog abandons.
        until = held.started + config.timeouts.job
        with deadline.waits_until(until):
            error = self._work(job, config.timeouts)
        with self._lock:
            if held.timed_out:
                # Already recorded by the heartbeat; the lease is gone.
                self._held.pop((job.id, job.token), None)
                return None
            if isinstance(error, JobTimeout) and time.monotonic() >= until:
                self.stats.timed_out += 1  # its own wait ran out just before the watchdog
            # Finished: the timeout check leaves it alone while its outcome is buffered.
            held.done = True
        return AttemptOutcome(job, error)

    def _work(self, job: Job, timeouts: Timeouts) -> BaseException | None:
        """The job's task, after its checks: what it raised, or None."""
        try:
            task = self.app.get_task(job.task)
        except NotFound as exc:
            return PermanentError(str(exc))
        try:
            task.before_run(self.store, job)  # declared fields, the access re-check
            if task.context:
                # Effects are SQL: a context task's database is the one the worker was
                # given (with the in-memory store, the store itself: no effects).
                db = cast(Database, self.db)
                task.func(JobContext(job, db, timeouts), **job.payload)
            else:
                task.func(**job.payload)
        except BaseException as exc:  # SystemExit too: this job's error, not the thread's
            return exc
        return None

    def _too_new(self, job: Job) -> bool:
        """A payload newer than this worker's task knows is never run nor failed: it goes
        back for a newer worker (the claim leaves such jobs alone; this holds even so)."""
        task = self.app.tasks.get(job.task)
        if task is None or job.version <= task.version:
            return False
        log.warning(
            "job %s of %s has payload version %s, newer than this worker's %s; released",
            job.id, job.task, job.version, task.version,
        )  # fmt: skip
        return True

    def _persist(self, jobs: list[Job], write: Callable[[], T]) -> T | None:
        """Run a write about held jobs, retrying while the database is away. Past the
        shortest of their leases the jobs may have been rescued: give up, and leave them
        to be recovered after lease expiry (their effects are claims, so never doubled)."""
        lease = min(self.app.queue_config(j.queue).timeouts.lease_seconds for j in jobs)
        give_up = time.monotonic() + lease
        delay = 0.05
        while True:
            try:
                with deadline.waits_until(give_up):  # one try's waits too (pool, answer, lock)
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
        self._record(outcomes)
        self._forget([o.job for o in outcomes])

    def _forget(self, jobs: list[Job]) -> None:
        with self._lock:
            for job in jobs:
                self._held.pop((job.id, job.token), None)

    def _maybe_recycle(self) -> None:
        """Over ``recycle_mib``: no more claims (``recycle_jobs`` is counted as jobs start)."""
        if self.recycle_mib is not None and rss_mib() >= self.recycle_mib:
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
            if self.advert.due():
                self.advert.advertise()
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
