"""``pigeon jobs stats`` and ``pigeon jobs purge`` on a real database file, and the
worker's ``--queue NAME=MIN:MAX`` syntax."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.cli.worker_cmd import parse_queues
from pigeon.exceptions import PermanentError
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.server import open_server_db

runner = CliRunner()


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_stats_table_shows_freshness_against_objectives(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    db = open_server_db(path)
    m = JobManager(db, clock=lambda: time.time() - 120)  # enqueued two minutes ago
    m.enqueue(JobSpec("grading", "grade"))
    m.enqueue(JobSpec("grading", "grade", delay=3600))
    m.enqueue(JobSpec("notify", "send", max_attempts=1, owner="comms-team"))
    (job,) = JobManager(db).lease_jobs("notify", "w", 1, lease=30)
    JobManager(db).finish([AttemptOutcome(job, PermanentError("no such address"))])
    db.close()
    out = invoke("jobs", "stats", "--db", str(path))
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    grading = [c.strip() for c in rows["grading"].split("│")[1:-1]]
    # queue, ready, delayed, reserved, stuck, failed, owners, oldest ready, objective, breach
    assert grading[:6] == ["grading", "1", "1", "0", "0", "0"]
    assert grading[7].endswith("m") and grading[8] == "60.0s" and grading[9] == "yes"
    notify = [c.strip() for c in rows["notify"].split("│")[1:-1]]
    assert notify[5:7] == ["1", "comms-team: 1"] and notify[9] == "no"


def test_purge_command_keeps_failed_jobs(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    db = open_server_db(path)
    past = JobManager(db, clock=lambda: time.time() - 3600)
    for _ in range(3):
        past.enqueue(JobSpec("q", "t"))
    past.enqueue(JobSpec("q", "t", max_attempts=1))
    jobs = past.lease_jobs("q", "w", 10, lease=30)
    past.finish(
        [AttemptOutcome(j) for j in jobs[:3]] + [AttemptOutcome(jobs[3], PermanentError("x"))]
    )
    out = invoke("jobs", "purge", "--db", str(path), "--older-than", "60")
    assert "purged 3 finished jobs older than 60.0s" in out
    week = invoke("jobs", "purge", "--db", str(path), "--older-than", str(7 * 86400))
    assert "purged 0 finished jobs older than 7.0d" in week  # was "10080.0m"
    assert [j["status"] for j in list_jobs(db)] == ["failed"]
    db.close()


def test_worker_queue_budgets_parse() -> None:
    assert parse_queues(["grading=12", "notify=2:4"]) == {"grading": 12, "notify": Budget(2, 4)}
    for bad, reason in (
        ("grading", "NAME=MAX or NAME=MIN:MAX"),
        ("grading=x", "NAME=MAX or NAME=MIN:MAX"),
        ("grading=0", "at least 1 thread"),
        ("grading=4:2", "min 4 > max 2"),
    ):
        with pytest.raises(typer.BadParameter, match=reason):
            parse_queues([bad])
