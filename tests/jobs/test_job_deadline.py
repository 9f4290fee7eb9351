"""A job's database waits end by its timeout: a job whose database is gone (the server cut
off, a partition, another process holding SQLite's write lock) ends in its own thread as a
timed-out attempt, retried by its policy, its effect done once, and the process is never
abandoned by the watchdog (which it is, at the supervisor timeout, if a wait holds the
job's thread past it). The outcome's write waits no longer than the time it is given."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.context import JobContext
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import STOPPED, Worker
from pigeon.storage.base import Database
from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.server import open_server_db
from tests.pgwire import RoundTrips
from tests.waiting import wait_for

from .threads import run_in_thread

JOB, SUPERVISOR, LEASE = 0.5, 0.8, 1.2
MARGIN = 0.3  # how late past its timeout an attempt may end, on a busy 2-core machine


def _app() -> App:
    app = App()
    timeouts = Timeouts(job=JOB, external_call=0.2, supervisor=SUPERVISOR, lease=LEASE)
    app.queue("q", timeouts=timeouts, backoff=Backoff(base=0.05, cap=0.05))
    return app


class Run:
    """A worker of one queue on ``db``, with what the watchdog did to it."""

    def __init__(self, app: App, db: Database) -> None:
        self.db = db
        self.abandoned: list[float] = []
        options = WorkerOptions(poll=0.05, poll_max=0.2)
        self.worker = Worker(app, db, {"q": 1}, options, on_stuck=self._stuck)
        self.thread = run_in_thread(self.worker)

    def _stuck(self) -> None:
        self.abandoned.append(time.monotonic())

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join()
        self.worker.join(10)  # the heartbeat too: the database is closed after it


@contextlib.contextmanager
def running(app: App, db: Database, restore: Callable[[], object]) -> Iterator[Run]:
    """``run`` while the block lasts; the database is given back (``restore``) before it
    stops, whatever happened, so no thread of it is left waiting."""
    run = Run(app, db)
    try:
        yield run
    finally:
        restore()
        run.stop()


def _history(db: Database) -> list[str]:
    (row,) = list_jobs(db, limit=10)
    return [a["outcome"] for a in show_job(db, row["id"])["history"]]


def _effects(db: Database) -> int:
    with db.transaction() as tx:
        return int(tx.sql("SELECT count(*) AS n FROM pigeon_effects").fetchone()["n"])


class FirstAttempt:
    """A task whose first attempt makes the database unreachable (``fault``) and then
    needs it; every attempt's effect is the same claim. ``spans``: each first attempt's
    start and end (monotonic)."""

    def __init__(self, fault: Callable[[], object]) -> None:
        self.fault = fault
        self.spans: list[tuple[float, float]] = []
        self.attempts = 0

    def __call__(self, ctx: JobContext, n: int) -> None:
        self.attempts += 1
        begun = time.monotonic()
        try:
            if self.attempts == 1:
                self.fault()
            ctx.effect(f"work:{n}", lambda tx: n)
        finally:
            if self.attempts == 1:
                self.spans.append((begun, time.monotonic()))


def _ends_on_time_and_is_retried(
    run: Run, task: FirstAttempt, restore: Callable[[], object]
) -> None:
    """The first attempt ends within its timeout, the process is not abandoned, and once
    the database is back the job is retried and succeeds, its effect done once."""
    wait_for(lambda: task.spans, timeout=SUPERVISOR + 2, what="the first attempt's end")
    begun, ended = task.spans[0]
    restore()
    wait_for(lambda: _history(run.db)[-1:] == ["succeeded"], timeout=10)
    time.sleep(max(0.0, begun + SUPERVISOR + 0.2 - time.monotonic()))  # past its deadline
    run.stop()
    assert ended - begun < JOB + MARGIN
    assert run.abandoned == [] and run.worker.exit_code == STOPPED
    assert run.worker.stats.timed_out == 1
    (row,) = list_jobs(run.db, limit=10)
    first, *_, last = show_job(run.db, row["id"])["history"]
    assert last["outcome"] == "succeeded"
    # Its outcome recorded once the database was back; or, if the pool took longer than
    # the lease to reconnect, the job recovered by lease expiry: its outcome given up
    # (unrecorded), or written after the rescue and fenced (lost).
    stats = run.worker.stats
    if first["outcome"] == "error":
        assert "JobTimeout" in first["error"] and (stats.unrecorded, stats.lost) == (0, 0)
    else:
        assert first["outcome"] == "lease_expired"
        assert (stats.unrecorded, stats.lost) in {(1, 0), (0, 1)}
    assert _effects(run.db) == 1


@pytest.mark.parametrize("fault", ["cut", "stall"])
def test_a_job_whose_postgres_is_gone_times_out_by_itself(
    fault: str, pg_relayed: PostgresDatabase, pg_relay: RoundTrips
) -> None:
    # cut: connections closed, new ones refused (the wait for a pooled connection);
    # stall: a partition, nothing answers (the wait for a statement's answer).
    app = _app()
    task = FirstAttempt(getattr(pg_relay, fault))
    app.task(task, queue="q", name="work", context=True)
    JobManager(pg_relayed, app).enqueue(JobSpec("q", "work", {"n": 1}, max_attempts=3))
    with running(app, pg_relayed, pg_relay.restore) as run:
        _ends_on_time_and_is_retried(run, task, pg_relay.restore)


def test_a_job_waiting_for_sqlites_write_lock_times_out_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    db = open_server_db(path, durability="normal")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def release() -> None:
        if other.in_transaction:
            other.execute("ROLLBACK")

    try:
        app = _app()
        # Another process takes the write lock and keeps it past the supervisor timeout.
        task = FirstAttempt(lambda: other.execute("BEGIN IMMEDIATE"))
        app.task(task, queue="q", name="work", context=True)
        JobManager(db, app).enqueue(JobSpec("q", "work", {"n": 1}, max_attempts=3))
        with running(app, db, release) as run:
            _ends_on_time_and_is_retried(run, task, release)
    finally:
        other.close()
        db.close()


def test_an_outcome_that_cannot_be_written_is_given_up_at_the_lease(
    pg_relayed: PostgresDatabase, pg_relay: RoundTrips
) -> None:
    # The job succeeds and the database goes as it returns: its outcome's write is retried
    # until the lease, each try waiting no longer than that (not the pool's 10 s), then
    # dropped; the job is run again once its lease has expired, its effect not redone.
    app = _app()
    done: list[float] = []

    @app.task(queue="q", context=True)
    def work(ctx: JobContext, n: int) -> None:
        ctx.effect(f"work:{n}", lambda tx: n)
        if not done:
            pg_relay.cut()
            done.append(time.monotonic())

    JobManager(pg_relayed, app).enqueue(JobSpec("q", "work", {"n": 1}, max_attempts=3))
    with running(app, pg_relayed, pg_relay.restore) as run:
        wait_for(lambda: done, timeout=5)
        wait_for(lambda: run.worker.stats.unrecorded, timeout=LEASE + 2)
        given_up = time.monotonic() - done[0]
        pg_relay.restore()
        wait_for(lambda: _history(pg_relayed)[-1:] == ["succeeded"], timeout=10)
    assert given_up < LEASE + MARGIN + 0.2  # the last try's backoff sleep included
    assert run.abandoned == [] and _history(pg_relayed) == ["lease_expired", "succeeded"]
    assert _effects(pg_relayed) == 1
