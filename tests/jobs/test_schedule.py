"""Periodic schedules: each tick once, and one broken schedule never holds up the others."""

from __future__ import annotations

import logging

import pytest

from pigeon.jobs.app import App
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.schedule import Scheduler
from pigeon.storage.base import Database
from tests.clocks import FakeClock


def test_a_broken_schedule_does_not_keep_the_others_from_running(
    db: Database, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(retention=None)
    app.queue("reports")

    @app.task(queue="reports")
    def nightly() -> None:
        pass

    # Declared first, so ticked first: a payload the task cannot take, and a task that
    # was renamed away. Each fails at every tick; neither may cost "ok" its run.
    app.periodic(every=60.0, task="nightly", name="bad-payload", day="monday")
    app.periodic(every=60.0, task="gone", name="bad-task")
    app.periodic(every=60.0, task="nightly", name="ok")
    scheduler = Scheduler(app, db, clock=clock)
    with caplog.at_level(logging.ERROR, logger="pigeon.jobs.schedule"):
        won = scheduler.tick_once()
    tick = int(clock() // 60)
    assert won == [("ok", tick)]
    assert [j["unique_key"] for j in list_jobs(db)] == [f"schedule:ok:{tick}"]
    failed = sorted(r.getMessage() for r in caplog.records)
    assert len(failed) == 2
    assert "bad-payload" in failed[0] and "bad-task" in failed[1]
    # The broken ones were not taken: once fixed, their current tick still runs.
    assert scheduler.tick_once() == []
