"""Worker budgets at run time: the pure scaling decision (properties) and a real worker
whose threads grow under a backlog and retire after it drains."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import App
from pigeon.jobs.autoscale import Budget, parse_budget, threads_wanted
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.supervisor import split_budgets
from pigeon.jobs.worker import Worker
from pigeon.storage.base import Database
from tests.waiting import wait_for

from .test_worker import statuses
from .threads import run_in_thread


@st.composite
def budgets(draw: st.DrawFn) -> Budget:
    high = draw(st.integers(1, 64))
    return Budget(draw(st.integers(0, high)), high)


counts = st.integers(0, 100)
idle = st.floats(0, 100, allow_nan=False)


@given(budgets(), counts, counts, st.integers(0, 10_000), idle, st.integers(1, 20))
def test_never_outside_the_budget(
    budget: Budget, threads: int, busy: int, backlog: int, quiet: float, batch: int
) -> None:
    assert (
        budget.min
        <= threads_wanted(budget, threads, busy, backlog, quiet, batch=batch)
        <= budget.max
    )


@given(budgets(), counts, st.integers(1, 10_000), idle)
def test_grows_while_every_thread_is_busy_and_jobs_wait(
    budget: Budget, threads: int, backlog: int, quiet: float
) -> None:
    if threads < budget.max:
        assert threads_wanted(budget, threads, threads, backlog, quiet) > threads


@given(budgets(), counts, counts, st.integers(1, 10_000), idle)
def test_never_shrinks_while_jobs_wait(
    budget: Budget, threads: int, busy: int, backlog: int, quiet: float
) -> None:
    assert threads_wanted(budget, threads, busy, backlog, quiet) >= min(threads, budget.max)


@given(budgets(), counts, counts)
def test_shrinks_to_the_busy_threads_after_keepalive(
    budget: Budget, threads: int, busy: int
) -> None:
    busy = min(busy, threads)
    after = threads_wanted(budget, threads, busy, 0, 10.0, keepalive=5.0)
    if budget.min <= threads <= budget.max and threads > max(busy, budget.min):
        assert after < threads
    assert after == max(budget.min, min(budget.max, busy))


@given(budgets(), counts, counts, st.floats(0, 4.99))
def test_holds_steady_when_quiet_for_less_than_keepalive(
    budget: Budget, threads: int, busy: int, quiet: float
) -> None:
    expected = max(budget.min, min(budget.max, threads))
    assert threads_wanted(budget, threads, busy, 0, quiet, keepalive=5.0) == expected


def test_budget_parsing_and_validation() -> None:
    assert parse_budget("12") == 12
    assert parse_budget("2:12") == Budget(2, 12)
    with pytest.raises(ConfigurationError, match="MIN:MAX"):
        parse_budget("two")
    with pytest.raises(ConfigurationError, match="min=5 max=2"):
        Budget(5, 2)
    app = App()
    app.queue("grading", min_workers=2, max_workers=12)
    assert app.queue_config("grading").budget(12) == Budget(2, 12)
    assert app.queue_config("grading").budget(Budget(0, 4)) == Budget(0, 4)
    with pytest.raises(ConfigurationError, match=r"'grading': 1:13 workers is outside"):
        app.queue_config("grading").budget(Budget(1, 13))


def test_supervisor_splits_min_and_max_without_exceeding_the_app() -> None:
    shares = split_budgets({"grading": Budget(3, 12), "notify": Budget(1, 1)}, 2)
    assert shares == [
        {"grading": Budget(2, 6), "notify": Budget(1, 1)},
        {"grading": Budget(1, 6)},
    ]
    assert sum(s["grading"].max for s in shares) == 12
    assert sum(s["grading"].min for s in shares) == 3


def test_threads_grow_under_a_backlog_and_retire_after_it(db: Database) -> None:
    app = App()
    app.queue("q", min_workers=1, max_workers=6, batch=1)
    gate = threading.Event()

    @app.task(queue="q")
    def wait_for_gate() -> None:
        gate.wait(10)

    worker = Worker(
        app, db, {"q": 6}, WorkerOptions(keepalive=0.5, control_every=0.05, poll_max=0.1)
    )
    assert worker.queues == {"q": Budget(1, 6)}
    thread = run_in_thread(worker)
    try:
        wait_for(lambda: worker.threads("q") == 1)
        time.sleep(0.3)
        assert worker.threads("q") == 1  # nothing waits: the minimum
        with db.transaction() as tx:
            for _ in range(20):
                enqueue(tx, JobSpec("q", "wait_for_gate"))
        # every thread is stuck on the gate while jobs wait: up to the maximum, no further
        wait_for(lambda: statuses(db) == {"reserved": 6, "queued": 14})
        time.sleep(0.3)
        assert worker.threads("q") == 6 and statuses(db) == {"reserved": 6, "queued": 14}
        gate.set()
        wait_for(lambda: statuses(db) == {"succeeded": 20})
        assert worker.threads("q") == 6  # drained, but not yet idle for the keepalive
        wait_for(lambda: worker.threads("q") == 1, timeout=10)
        wait_for(lambda: _claim_threads() == 1)
    finally:
        gate.set()
        worker.stop()
        thread.join()
    assert worker.scaler.peak("q") == 6


def _claim_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("pigeon-q-"))
