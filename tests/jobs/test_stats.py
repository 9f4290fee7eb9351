"""Queue stats against freshness objectives, and the breach alert: once per episode."""

from __future__ import annotations

import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import PermanentError
from pigeon.jobs import records
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.stats import (
    FreshnessMonitor,
    failed_by_owner,
    is_breach,
    open_breaches,
    percentiles,
    queue_stats,
    service_times,
)
from pigeon.jobs.worker import Worker
from pigeon.storage.base import Database
from tests.clocks import FakeClock
from tests.waiting import wait_for

from .threads import run_in_thread


def test_stats_count_only_due_queued_jobs_as_ready(db: Database, clock: FakeClock) -> None:
    app = App()
    app.queue("grading", freshness=30, owner="graders")
    app.queue("idle", freshness=5)
    for name in ("old", "young", "later", "held", "stuck", "doomed"):
        app.task(lambda: None, queue="grading", name=name)
    m = JobManager(db, app, clock=clock)
    m.enqueue(JobSpec("grading", "old"))
    clock.advance(10)
    m.enqueue(JobSpec("grading", "young"))
    m.enqueue(JobSpec("grading", "later", delay=3600))  # delayed: not ready, however old
    m.enqueue(JobSpec("grading", "held"))
    m.enqueue(JobSpec("grading", "stuck"))
    m.enqueue(JobSpec("grading", "doomed", max_attempts=1))
    clock.advance(5)
    (first,) = m.lease_jobs("grading", "w", 1, lease=60)  # the oldest: no longer ready
    assert first.task == "old"
    held = m.lease_jobs("grading", "w", 3, lease=60)
    assert [j.task for j in held] == ["young", "held", "stuck"]
    m.finish([AttemptOutcome(held[0], PermanentError("bad answer"))])
    clock.advance(61)
    m.renew([held[1], first], lease=60)  # "stuck" keeps an expired lease
    (stats, idle) = queue_stats(db, app, now=clock())
    assert (stats.queue, idle.queue) == ("grading", "idle")
    assert (stats.ready, stats.delayed, stats.reserved, stats.stuck) == (1, 1, 2, 1)
    assert (stats.failed, stats.owners) == (1, {"graders": 1})
    assert stats.oldest_ready_age == 66.0  # "doomed", enqueued 66 s ago
    assert stats.objective == 30 and stats.breach
    assert (idle.ready, idle.oldest_ready_age, idle.breach) == (0, None, False)
    owners = failed_by_owner(db)
    assert owners["graders"]["failed"] == 1
    assert "bad answer" in owners["graders"]["recent"][0]["error"]


def test_breach_alert_fires_once_per_episode_across_monitors(
    db: Database, clock: FakeClock
) -> None:
    alerts: list[tuple[str, float, float]] = []
    app = App(on_freshness_breach=lambda q, age, objective: alerts.append((q, age, objective)))
    app.queue("q", freshness=10)
    app.task(lambda: None, queue="q", name="t")
    m = JobManager(db, app, clock=clock)
    first, second = FreshnessMonitor(app, db, clock=clock), FreshnessMonitor(app, db, clock=clock)
    m.enqueue(JobSpec("q", "t"))
    clock.advance(5)
    assert first.check(["q"]) == [] and alerts == []  # within the objective
    clock.advance(10)
    assert first.check(["q"]) == ["q"]
    assert second.check(["q"]) == []  # another process sees the same episode
    clock.advance(10)
    assert first.check(["q"]) == [] and second.check(["q"]) == []
    assert alerts == [("q", 15.0, 10.0)]
    assert [b["queue"] for b in open_breaches(db)] == ["q"]
    (job,) = m.lease_jobs("q", "w", 1, lease=60)  # drained: the episode ends
    m.finish([AttemptOutcome(job)])
    assert first.check(["q"]) == [] and open_breaches(db) == []
    second.check(["q"])
    m.enqueue(JobSpec("q", "t"))
    clock.advance(11)
    assert second.check(["q"]) == ["q"]  # a new episode alerts again, once
    assert first.check(["q"]) == []
    assert len(alerts) == 2


def test_a_failing_hook_does_not_stop_the_monitor(db: Database, clock: FakeClock) -> None:
    def hook(queue: str, age: float, objective: float) -> None:
        raise RuntimeError("pager down")

    app = App(on_freshness_breach=hook)
    app.queue("q", freshness=1)
    app.task(lambda: None, queue="q", name="t")
    JobManager(db, app, clock=clock).enqueue(JobSpec("q", "t"))
    clock.advance(2)
    assert FreshnessMonitor(app, db, clock=clock).check(["q"]) == ["q"]


@given(st.floats(0, 1e6, allow_nan=False) | st.none(), st.floats(0.001, 1e6))
def test_breach_means_ready_for_longer_than_the_objective(
    age: float | None, objective: float
) -> None:
    assert is_breach(age, objective) == (age is not None and age > objective)


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_within_the_samples(samples: list[float]) -> None:
    p = percentiles(samples)
    assert min(samples) <= p["p50"] <= p["p90"] <= p["p99"] <= max(samples)
    assert set(p.values()) <= set(samples)


def test_percentiles_of_known_samples() -> None:
    assert percentiles([float(n) for n in range(1, 101)]) == {
        "p50": 50.0,
        "p90": 90.0,
        "p99": 99.0,
    }
    assert percentiles([0.3]) == {"p50": 0.3, "p90": 0.3, "p99": 0.3}
    assert percentiles([]) == {}


def test_worker_fires_the_breach_alert_once_while_a_job_waits(db: Database) -> None:
    alerts: list[str] = []
    gate = threading.Event()
    app = App(on_freshness_breach=lambda q, age, objective: alerts.append(q))
    app.queue("q", min_workers=1, max_workers=1, freshness=0.2, batch=1)

    @app.task(queue="q")
    def block() -> None:
        gate.wait(10)

    m = JobManager(db, app)
    m.enqueue(JobSpec("q", "block"))
    m.enqueue(JobSpec("q", "block"))  # waits behind the first: its age grows
    worker = Worker(app, db, {"q": 1}, WorkerOptions(control_every=0.05))
    thread = run_in_thread(worker)
    try:
        wait_for(lambda: alerts == ["q"])
        time.sleep(0.3)  # still in breach: no second alert
        assert alerts == ["q"]
    finally:
        gate.set()
        worker.stop()
        thread.join()


def test_an_episode_left_open_by_a_monitor_that_went_away_is_closed_by_the_next(
    db: Database, clock: FakeClock
) -> None:
    # A breach, then every worker restarted (a deploy, recycling) before the queue was
    # fresh again: the monitor that opened the episode is gone. The new monitors must end
    # it when they see the queue fresh, or the next breach never alerts.
    alerts: list[str] = []
    app = App(on_freshness_breach=lambda q, age, objective: alerts.append(q))
    app.queue("q", freshness=10)
    app.task(lambda: None, queue="q", name="t")
    m = JobManager(db, app, clock=clock)
    m.enqueue(JobSpec("q", "t"))
    clock.advance(11)
    assert FreshnessMonitor(app, db, clock=clock).check(["q"]) == ["q"]  # then it exits
    (job,) = m.lease_jobs("q", "w", 1, lease=60)
    m.finish([AttemptOutcome(job)])
    restarted = FreshnessMonitor(app, db, clock=clock)
    assert restarted.check(["q"]) == [] and open_breaches(db) == []
    m.enqueue(JobSpec("q", "t"))
    clock.advance(11)
    assert restarted.check(["q"]) == ["q"]
    assert alerts == ["q", "q"]


def test_occupied_time_is_measured_from_when_each_job_started_not_from_the_claim(
    db: Database,
) -> None:
    # A batch of 3 jobs of ~0.3 s each, run one after the other by one thread. The
    # service times (the planner's s, the dashboard's occupied-time distribution) and
    # each attempt event are ~0.3 s, not the 0.3 / 0.6 / 0.9 s since the batch's claim.
    app = App()
    app.queue("q", batch=3)

    @app.task(queue="q")
    def nap() -> None:
        time.sleep(0.3)

    with db.transaction() as tx:
        rid = records.accept(
            tx,
            kind="k",
            data={},
            obligations={f"o{i}": JobSpec("q", "nap") for i in range(3)},
            app=app,
        )
    worker = Worker(app, db, {"q": 1})
    thread = run_in_thread(worker)
    try:
        wait_for(lambda: len(service_times(db, "q")) == 3)
    finally:
        worker.stop()
        thread.join()
    assert worker.stats.by_queue == {"q": 3}  # one batch
    times = service_times(db, "q")
    assert all(0.29 <= s < 0.5 for s in times), times
    seconds = [
        e["detail"]["seconds"] for e in records.get(db, rid)["events"] if e["state"] == "attempt"
    ]
    assert len(seconds) == 3 and all(0.29 <= s < 0.5 for s in seconds), seconds
