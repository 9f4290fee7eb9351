"""Worker processes under the Supervisor: SIGTERM mid-job, recycling, one run per tick."""

from __future__ import annotations

import logging
import re
import signal
import time
from pathlib import Path

import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager, enqueue
from pigeon.jobs.supervisor import Supervisor, WorkerOptions, split
from pigeon.storage.base import Database
from tests.databases import tables_locked
from tests.ops.scrape import lifecycle_counts, metrics_text
from tests.waiting import wait_for

from .test_worker import statuses

APP = "tests.jobs.chaos_app:app"


def test_split_spreads_threads_evenly() -> None:
    assert split({"grading": 12, "notify": 4}, 2) == [
        {"grading": 6, "notify": 2},
        {"grading": 6, "notify": 2},
    ]
    assert split({"a": 3}, 2) == [{"a": 2}, {"a": 1}]
    assert split({"a": 1}, 3) == [{"a": 1}]


def test_budget_is_checked(server_db_url: str) -> None:
    with pytest.raises(
        ConfigurationError, match=r"'chaos': 9 workers is outside its budget 1\.\.8"
    ):
        Supervisor(APP, server_db_url, {"chaos": 9})
    with pytest.raises(ConfigurationError, match="module:attr"):
        Supervisor("nocolon", server_db_url, {"chaos": 1})


def test_its_sizes_are_said_in_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    assert Supervisor(APP, db, {"chaos": 1}, processes=1).sizes() == (
        "1 process, threads min:max {'chaos': '1:1'}"
    )
    assert Supervisor(APP, db, {"chaos": 4}, processes=2).sizes().startswith("2 processes, ")


def _napping(db: Database, url: str, seconds: float) -> tuple[Supervisor, int]:
    """One worker process under its supervisor, holding a ``nap`` of ``seconds``."""
    job_id = JobManager(db).enqueue(JobSpec("slow", "nap", {"seconds": seconds, "n": 1}))
    sup = Supervisor(APP, url, {"slow": 1}, processes=1, options=WorkerOptions(schedules=False))
    sup.start()
    wait_for(lambda: show_job(db, job_id)["status"] == "reserved", timeout=20)
    return sup, job_id


def test_sigterm_mid_job_finishes_it_within_the_lease(db: Database, server_db_url: str) -> None:
    sup, job_id = _napping(db, server_db_url, 1.0)
    sup.stop()  # SIGTERM while the job sleeps
    assert [s.process.exitcode for s in sup.slots if s.process] == [0]
    info = show_job(db, job_id)
    assert (info["status"], info["attempts"]) == ("succeeded", 1)
    assert [a["outcome"] for a in info["history"]] == ["succeeded"]


def test_a_child_running_past_the_grace_shows_its_stacks_then_is_killed(
    db: Database,
    server_db_url: str,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pigeon.jobs.supervisor")
    sup, _ = _napping(db, server_db_url, 4.0)
    sup.stop(grace=1)  # the task sleeps on past it
    assert [s.process.exitcode for s in sup.slots if s.process] == [-signal.SIGKILL]
    assert re.search(r"worker \d+ did not stop within 1s", caplog.text)
    err = capfd.readouterr().err
    assert re.search(r'File ".*chaos_app\.py", line \d+ in nap', err), err[-2000:]
    assert "in _claim_loop" in err  # every thread, not only the main one


def test_a_child_stopped_while_its_database_is_locked_exits_within_the_grace(
    db: Database, server_db_url: str
) -> None:
    """Its job's writes wait out the job's timeout, its outcome and its registry row give
    up by the lease: the child exits on its own before the supervisor would kill it."""
    sup, _ = _napping(db, server_db_url, 0.5)
    with tables_locked(server_db_url, "pigeon_jobs", "pigeon_workers", "pigeon_effects"):
        started = time.monotonic()
        sup.stop()
        took = time.monotonic() - started
    assert [s.process.exitcode for s in sup.slots if s.process] == [0], took
    assert took < sup.grace


def test_supervisor_replaces_recycled_workers(
    db: Database, server_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pigeon.jobs.supervisor")
    with db.transaction() as tx:
        for n in range(120):
            enqueue(tx, JobSpec("chaos", "bump", {"n": n * 250}))  # n*250 % 250 != 7
    sup = Supervisor(
        APP,
        server_db_url,
        {"chaos": 2},
        processes=1,
        options=WorkerOptions(recycle_jobs=40, batch=4, schedules=False),
    )
    sup.start()
    try:
        deadline = time.monotonic() + 40
        while statuses(db).get("succeeded", 0) < 120:
            assert time.monotonic() < deadline
            sup.check()
            time.sleep(0.05)
    finally:
        sup.stop(grace=5)
    assert sup.recycled >= 2
    assert statuses(db) == {"succeeded": 120}
    # each recycle is one line at WARNING, the level every pigeon process shows by default
    recycled = [r for r in caplog.records if "recycled after" in r.getMessage()]
    assert len(recycled) == sup.recycled
    assert {r.levelno for r in recycled} == {logging.WARNING}
    # and counted in the database, as /metrics shows it (written off the supervisor's loop)
    wait_for(lambda: lifecycle_counts(metrics_text(db))["worker_recycled"] == sup.recycled)


def test_schedule_runs_once_per_tick_across_three_workers(db: Database, server_db_url: str) -> None:
    sup = Supervisor(APP, server_db_url, {"chaos": 3}, processes=3)
    assert len(sup.slots) == 3
    sup.start()
    try:
        wait_for(lambda: statuses(db).get("succeeded", 0) >= 5, timeout=30)
    finally:
        sup.stop(grace=5)
    with db.transaction() as tx:
        ticks = tx.fetchall("tick_list", {"schedule": "every-half-second"})
    jobs = list_jobs(db, limit=1000)
    keys = [j["unique_key"] for j in jobs]
    assert len(keys) == len(set(keys)) == len(ticks) >= 5
    assert {f"schedule:every-half-second:{t['tick']}" for t in ticks} == set(keys)
    assert all(j["attempts"] == 1 for j in jobs if j["status"] == "succeeded")
    numbers = sorted(t["tick"] for t in ticks)
    # consecutive ticks while the workers were up, none taken twice
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_a_child_that_keeps_failing_at_start_is_relaunched_with_backoff(tmp_path: Path) -> None:
    # The database cannot be opened (here: its directory is missing; at a deploy, the
    # database not up yet): every child exits at once. Relaunched on every check (5 a
    # second), each a fresh interpreter importing the app, the supervisor pinned a CPU
    # and filled the log. It now waits longer after each quick failure.
    sup = Supervisor(
        APP,
        str(tmp_path / "missing" / "jobs.db"),
        {"chaos": 1},
        processes=1,
        options=WorkerOptions(schedules=False),
    )
    sup.start()
    try:
        slot = sup.slots[0]
        for expected_wait in (0.5, 1.0):
            first = slot.process
            assert first is not None
            first.join(30)
            assert first.exitcode not in (None, 0)
            assert sup.check() == 0  # a quick failure: not relaunched at once
            assert slot.process is first
            time.sleep(expected_wait + 0.1)
            assert sup.check() == 1  # relaunched once its backoff has passed
    finally:
        sup.stop(grace=5)
