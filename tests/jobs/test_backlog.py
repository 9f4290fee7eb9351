"""A backlog that cannot hide (issue 16): a worker claims only what its free threads can
start now, a job claimed but not started still counts as waiting, ``recycle_jobs`` is
exact whatever was claimed, and a job out of age keeps its last error. Real SQLite and
PostgreSQL (the ``db`` fixture runs each test on both)."""

from __future__ import annotations

import threading
import time

import pytest

from pigeon.jobs import stats
from pigeon.jobs.app import App
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import RECYCLE, Worker
from pigeon.ops.queries import overview
from pigeon.storage.base import Database
from tests.clocks import FakeClock
from tests.jobs.test_worker import statuses
from tests.jobs.threads import run_in_thread
from tests.waiting import wait_for


@pytest.mark.parametrize(
    "options",
    [
        # The default: one job per free thread; the rest stay queued, visibly waiting.
        WorkerOptions(batch=8, control_every=0.05, schedules=False),
        # Prefetch asked for: 8 claimed at once, 7 of them claimed behind the running one;
        # not started, they still count as waiting.
        WorkerOptions(batch=8, prefetch=8, control_every=0.05, schedules=False),
    ],
    ids=["prefetch-1", "prefetch-8"],
)
def test_a_busy_queue_behind_its_objective_fires_the_breach_hook(
    db: Database, options: WorkerOptions
) -> None:
    # One thread, 8 jobs of 0.5 s: the last one waits 3.5 s behind a 1 s objective. Before
    # the started marker, the worker claimed its batch of 8 at once, the queue showed
    # ready 0 and no breach, and this hook never fired.
    fired: list[tuple[str, float, float]] = []
    app = App(on_freshness_breach=lambda q, age, objective: fired.append((q, age, objective)))
    app.queue("q", min_workers=1, max_workers=1, freshness=1.0, timeouts=Timeouts(job=5.0))
    release = threading.Event()

    @app.task(queue="q")
    def slow() -> None:
        release.wait(0.5)

    with db.transaction() as tx:  # one commit: every job is due at once
        for _ in range(8):
            enqueue(tx, JobSpec("q", "slow"), app=app)
    began = time.monotonic()
    worker = Worker(app, db, {"q": 1}, options)
    thread = run_in_thread(worker)
    try:
        wait_for(lambda: bool(fired), timeout=3.5)
        assert time.monotonic() - began < 3.5
        (queue, age, objective) = fired[0]
        assert queue == "q" and objective == 1.0 and age > 1.0
        # Every reader agrees: the oldest job waits past the objective, several wait, and
        # at most one runs (none for a moment between two jobs).
        (row,) = stats.queue_stats(db, app)
        assert row.breach and row.ready >= 5 and row.reserved <= 1, row
        (page,) = overview(db, app, history=False)["queues"]
        assert page["breach"] and page["ready"] >= 5 and page["workers"]["busy"] <= 1
    finally:
        release.set()
        worker.stop()
        thread.join(10)
    assert stats.open_breaches(db)  # the episode stays open until the queue is fresh


def test_claimed_but_not_started_counts_as_waiting(db: Database, clock: FakeClock) -> None:
    app = App()
    app.queue("q", freshness=10.0)
    app.task(lambda: None, queue="q", name="t")
    m = JobManager(db, app, clock=clock)
    for _ in range(3):
        m.enqueue(JobSpec("q", "t"))
    due = clock.now
    clock.advance(30.0)
    first, second, third = m.lease_jobs("q", "w", 3, lease=60.0, start=1)
    # One running, two claimed behind it: waiting, the oldest of them 30 s old.
    (row,) = stats.queue_stats(db, app, now=clock.now)
    assert (row.ready, row.reserved, row.stuck) == (2, 1, 0)
    assert row.oldest_ready_age == pytest.approx(30.0) and row.breach
    assert m.pressure("q", cap=100) == (2, pytest.approx(due))
    (page,) = overview(db, app, now=clock.now, history=False)["queues"]
    assert (page["ready"], page["reserved"], page["workers"]["busy"]) == (2, 1, 1)
    assert page["oldest_ready_age"] == pytest.approx(30.0)
    assert show_job(db, second.id)["started_at"] is None
    assert show_job(db, second.id)["claimed_at"] == clock.now
    # The second starts: running now; the third still waits.
    clock.advance(1.0)
    assert m.start_job(second)
    assert show_job(db, second.id)["started_at"] == clock.now
    (row,) = stats.queue_stats(db, app, now=clock.now)
    assert (row.ready, row.reserved) == (1, 2)
    m.finish([AttemptOutcome(first), AttemptOutcome(second), AttemptOutcome(third)])
    (row,) = stats.queue_stats(db, app, now=clock.now)
    assert (row.ready, row.reserved, row.succeeded, row.oldest_ready_age) == (0, 0, 3, None)


def test_a_job_whose_lease_was_lost_is_not_marked_started(db: Database, clock: FakeClock) -> None:
    m = JobManager(db, clock=clock)
    m.enqueue(JobSpec("q", "t"))
    (job,) = m.lease_jobs("q", "w", 1, lease=5.0, start=0)
    clock.advance(6.0)
    (rescued,) = m.lease_jobs("q", "rescuer", 1, lease=5.0, start=0)
    assert not m.start_job(job)  # its lease is gone: it must not start
    assert m.start_job(rescued)


def test_recycle_jobs_is_exact_whatever_the_batch(db: Database) -> None:
    # Batch 8, all 8 claimed at once (prefetch 8), recycle after 5: the process ends after
    # exactly 5 started jobs, and the 3 others go back ready for the next process.
    app = App()
    app.queue("q", timeouts=Timeouts(job=5.0))
    ran: list[int] = []

    @app.task(queue="q")
    def note(i: int) -> None:
        ran.append(i)

    with db.transaction() as tx:
        for i in range(8):
            enqueue(tx, JobSpec("q", "note", {"i": i}), app=app)
    options = WorkerOptions(batch=8, prefetch=8, recycle_jobs=5, schedules=False)
    worker = Worker(app, db, {"q": 1}, options)
    assert worker.run(grace=5) == RECYCLE
    assert worker.stats.claimed == 8 and worker.stats.started == 5 and len(ran) == 5
    assert statuses(db) == {"succeeded": 5, "queued": 3}
    # Released, not left to their lease: ready at once, their attempt refunded.
    assert sorted(j["attempts"] for j in list_jobs(db, status="queued")) == [0, 0, 0]
    assert stats.queue_stats(db, app)[0].ready == 3
    nxt = Worker(app, db, {"q": 1}, options)  # the next process runs the 3 left
    thread = run_in_thread(nxt)
    try:
        wait_for(lambda: statuses(db) == {"succeeded": 8})
    finally:
        nxt.stop()
        thread.join(10)
    assert nxt.stats.started == 3


def test_recycle_jobs_is_exact_across_threads(db: Database) -> None:
    # 4 threads of one queue starting jobs at once: still exactly 5 started.
    app = App()
    app.queue("q", min_workers=4, max_workers=4, timeouts=Timeouts(job=5.0))
    ran: list[int] = []

    @app.task(queue="q")
    def note(i: int) -> None:
        ran.append(i)
        time.sleep(0.05)

    with db.transaction() as tx:
        for i in range(12):
            enqueue(tx, JobSpec("q", "note", {"i": i}), app=app)
    options = WorkerOptions(batch=8, prefetch=2, recycle_jobs=5, schedules=False)
    worker = Worker(app, db, {"q": 4}, options)
    assert worker.run(grace=5) == RECYCLE
    assert worker.stats.started == 5 and len(ran) == 5
    assert statuses(db) == {"succeeded": 5, "queued": 7}


def test_a_job_out_of_age_keeps_its_last_error_beside_the_age_message(
    db: Database, clock: FakeClock
) -> None:
    app = App()

    @app.task(queue="q", max_attempts=10, max_age=60.0)
    def call_provider() -> None:
        raise ConnectionError("provider down: 503")

    m = JobManager(db, app, clock=clock)
    job_id = m.enqueue(JobSpec("q", "call_provider"))
    (job,) = m.lease_jobs("q", "w", 1, lease=30.0)
    m.finish([AttemptOutcome(job, ConnectionError("provider down: 503"))])
    assert show_job(db, job_id)["status"] == "queued"  # retried: budget left
    clock.advance(120.0)  # past its max age when it comes round again
    assert m.lease_jobs("q", "w", 1, lease=30.0) == []
    job = show_job(db, job_id)
    assert job["status"] == "failed"
    assert job["last_error"].startswith("older than its max age (120.0s > 60s)")
    assert job["last_error"].endswith("; last error: ConnectionError: provider down: 503")
    assert "provider down: 503" in job["history"][-1]["error"]
    assert "older than its max age" in job["history"][-1]["error"]
