"""Retention: finished jobs purged in bounded batches; failed and live jobs never."""

from __future__ import annotations

import threading
import time

import pytest

from pigeon.exceptions import ConfigurationError, PermanentError
from pigeon.jobs.app import App
from pigeon.jobs.failed import FailedStore, list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.retention import purge_finished, purge_ticks
from pigeon.jobs.schedule import Scheduler
from pigeon.jobs.worker import Worker
from pigeon.storage.base import Database
from tests.clocks import FakeClock
from tests.waiting import wait_for

from .threads import run_in_thread

DAY = 86400.0


def _finish_all(m: JobManager, queue: str, error: BaseException | None = None) -> list[int]:
    jobs = m.lease_jobs(queue, "w", 1000, lease=60)
    m.finish([AttemptOutcome(j, error) for j in jobs])
    return [j.id for j in jobs]


def test_purges_old_finished_jobs_in_batches_and_keeps_the_rest(
    db: Database, clock: FakeClock
) -> None:
    m = JobManager(db, App(), clock=clock)
    with db.transaction() as tx:
        for n in range(25):
            enqueue(tx, JobSpec("done", "t", {"n": n}), now=clock())
        enqueue(tx, JobSpec("broken", "t", max_attempts=1), now=clock())
        enqueue(tx, JobSpec("dropped", "t"), now=clock())
        enqueue(tx, JobSpec("waiting", "t"), now=clock())
    old = _finish_all(m, "done")
    _finish_all(m, "broken", PermanentError("no"))
    (dropped,) = list_jobs(db, queue="dropped")
    FailedStore(db, clock=clock).cancel(dropped["id"], reviewer="ann", reason="duplicate")
    clock.advance(8 * DAY)
    with db.transaction() as tx:
        enqueue(tx, JobSpec("done", "t", {"n": 99}), now=clock())
    (recent,) = _finish_all(m, "done")
    assert purge_finished(db, 7 * DAY, batch=10, max_batches=2, clock=clock) == 20
    assert purge_finished(db, 7 * DAY, batch=10, clock=clock) == 6  # 5 done + the cancelled
    assert purge_finished(db, 7 * DAY, batch=10, clock=clock) == 0
    left = {j["id"]: j["status"] for j in list_jobs(db, limit=100)}
    assert sorted(left.values()) == ["failed", "queued", "succeeded"]
    assert recent in left and not set(old) & set(left)
    with db.transaction() as tx:
        for job_id in old:
            assert tx.fetchall("job_attempts", {"job_id": job_id}) == []
        assert tx.fetchall("job_reviews", {"job_id": dropped["id"]}) == []
    failed = next(i for i, s in left.items() if s == "failed")
    assert show_job(db, failed)["history"]  # the failed store keeps its history


def test_retention_must_be_positive(db: Database) -> None:
    with pytest.raises(ConfigurationError, match="retention must be > 0"):
        purge_finished(db, 0)
    with pytest.raises(ConfigurationError, match="retention must be > 0"):
        App(retention=-1)


def test_worker_maintenance_purges(db: Database) -> None:
    app = App(retention=0.2)
    ran = threading.Event()

    @app.task(queue="q")
    def noop() -> None:
        ran.set()

    JobManager(db, app).enqueue(JobSpec("q", "noop"))
    worker = Worker(app, db, {"q": 1}, WorkerOptions(control_every=0.05, purge_every=0.1))
    thread = run_in_thread(worker)
    try:
        assert ran.wait(10)
        wait_for(lambda: list_jobs(db) == [])
    finally:
        worker.stop()
        thread.join()
    assert worker.stats.purged == 1


def test_a_unique_key_holds_while_its_job_is_kept_and_is_freed_by_the_purge(
    db: Database, clock: FakeClock
) -> None:
    # The documented window of a unique_key (JobSpec.unique_key): not a lock released
    # when the job ends (Procrastinate's queueing_lock, celery-once), but enqueue
    # idempotency for as long as the job is kept: a finished job still holds its key,
    # and the key is free again once retention has purged the job. A failed job is never
    # purged, so it holds its key until reviewed (a cancel lets it be purged).
    m = JobManager(db, clock=clock)
    spec = JobSpec("q", "t", unique_key="invoice:42")
    first = m.enqueue(spec)
    _finish_all(m, "q")
    clock.advance(6 * DAY)
    assert m.enqueue(spec) == first  # finished, still kept: nothing new runs
    assert _finish_all(m, "q") == []
    clock.advance(2 * DAY)
    assert purge_finished(db, 7 * DAY, clock=clock) == 1
    second = m.enqueue(spec)
    assert second != first
    failing = JobSpec("q", "t", unique_key="refund:7", max_attempts=1)
    failed = m.enqueue(failing)
    _finish_all(m, "q", PermanentError("no"))
    clock.advance(30 * DAY)
    purge_finished(db, 7 * DAY, clock=clock)
    assert m.enqueue(failing) == failed


def test_worker_maintenance_purges_old_schedule_ticks_and_keeps_recent_ones(
    db: Database,
) -> None:
    # A schedule writes one tick row per period (86,400 a day at every=1 s) and only the
    # current tick is ever taken: rows past the retention are history nobody reads.
    app = App(retention=DAY)
    app.queue("q")
    app.task(lambda: None, queue="q", name="noop")
    app.periodic(every=3600.0, task="noop", name="hourly")
    now = time.time()
    for hours_ago in (50, 30, 2, 1):
        assert Scheduler(app, db, clock=lambda h=hours_ago: now - h * 3600).tick_once()
    worker = Worker(
        app, db, {"q": 1}, WorkerOptions(control_every=0.05, purge_every=0.1, schedules=False)
    )
    thread = run_in_thread(worker)

    def ticks() -> list[int]:
        with db.transaction() as tx:
            return [t["tick"] for t in tx.fetchall("tick_list", {"schedule": "hourly"})]

    try:
        wait_for(lambda: len(ticks()) == 2, timeout=5)
    finally:
        worker.stop()
        thread.join()
    assert ticks() == [int((now - 7200) // 3600), int((now - 3600) // 3600)]
    # The current tick, never taken before, is still taken once.
    scheduler = Scheduler(app, db, clock=lambda: now)
    assert len(scheduler.tick_once()) == 1 and scheduler.tick_once() == []


def test_purge_ticks_goes_in_bounded_batches_across_gaps(db: Database) -> None:
    app = App(retention=None)
    app.queue("q")
    app.task(lambda: None, queue="q", name="noop")
    schedule = app.periodic(every=10.0, task="noop", name="s")
    for tick in [*range(0, 5), *range(50, 55)]:  # workers were down in between
        assert Scheduler(app, db, clock=lambda t=tick: t * 10.0 + 1).tick_once()
    # Ticks before (640 - 100) / 10 = 54 go, two tick numbers per transaction.
    assert purge_ticks(db, [schedule], 100.0, batch=2, clock=lambda: 640.0) == 9
    with db.transaction() as tx:
        left = [t["tick"] for t in tx.fetchall("tick_list", {"schedule": "s"})]
    assert left == [54]
