from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.jobs import records
from pigeon.jobs.failed import show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.server import open_server_db
from tests.clocks import FakeClock

runner = CliRunner()


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_plan_reproduces_the_issue_figures() -> None:
    out = invoke(
        "plan",
        "--backlog",
        "1000",
        "--service-time",
        "0.12",
        "--arrival-rate",
        "50",
        "--target",
        "10",
        "--workers",
        "6,12,18",
    )
    lines = [line.split() for line in out.splitlines()]
    rows = {cells[1]: cells for cells in lines if len(cells) > 3 and cells[1] in {"6", "12", "18"}}
    assert rows["6"][3:7] == ["50", "│", "0", "│"] and "no drain" in " ".join(rows["6"])
    assert rows["12"][3:9] == ["100", "│", "50", "│", "20", "s"]
    assert rows["18"][3:9] == ["150", "│", "100", "│", "10", "s"]
    assert "minimum workers for T=10 s: 18" in out


def test_plan_without_arrivals_and_memory() -> None:
    out = invoke(
        "plan",
        "--backlog",
        "1000",
        "--service-time",
        "0.12",
        "--arrival-rate",
        "0",
        "--target",
        "10",
        "--workers",
        "12",
    )
    assert "10 s" in out and "84" in out and "10.08 s" in out
    out = invoke(
        "plan",
        "--backlog",
        "10",
        "--service-time",
        "1",
        "--arrival-rate",
        "0",
        "--target",
        "10",
        "--workers",
        "10",
        "--memory-per-worker",
        "128",
    )
    assert "1,280 MiB" in out


def test_plan_reads_service_time_from_history(tmp_path: Path) -> None:
    db = open_server_db(tmp_path / "s.db")
    now = FakeClock(1000.0)
    m = JobManager(db, clock=now)
    for _ in range(5):
        m.enqueue(JobSpec("grading", "grade"))
    for _ in range(5):
        (job,) = m.lease_jobs("grading", "w", 1, lease=10)
        now.advance(0.25)
        m.finish([AttemptOutcome(job)])
    out = invoke(
        "plan",
        "--db",
        str(tmp_path / "s.db"),
        "--queue",
        "grading",
        "--backlog",
        "100",
        "--arrival-rate",
        "0",
        "--target",
        "5",
    )
    assert "S = 0.25 s (mean of 5 jobs of 'grading'; median 0.25 s, p95 0.25 s)" in out
    assert "minimum workers for T=5 s: 5" in out


def test_plan_refuses_bad_input() -> None:
    result = runner.invoke(
        app,
        env={"COLUMNS": "200"},
        args=["plan", "--backlog", "1", "--arrival-rate", "0", "--target", "1"],
    )
    assert result.exit_code != 0 and "--service-time" in result.output


@pytest.fixture
def failed_db(tmp_path: Path) -> tuple[Path, int, str]:
    path = tmp_path / "s.db"
    db = open_server_db(path)
    with db.transaction() as tx:
        rid = records.accept(
            tx,
            kind="answer",
            data={},
            obligations={"grading": JobSpec("grading", "grade", max_attempts=1)},
        )
    m = JobManager(db, rng=random.Random(1))
    (job,) = m.lease_jobs("grading", "w", 1, lease=10)
    m.finish([AttemptOutcome(job, RuntimeError("grader exploded"))])
    return path, job.id, rid


def test_jobs_list_failed_retry_cancel(failed_db: tuple[Path, int, str]) -> None:
    path, job_id, rid = failed_db
    assert "grader exploded" in invoke("jobs", "failed", "--db", str(path))
    assert "failed" in invoke("jobs", "list", "--db", str(path))
    out = invoke(
        "jobs",
        "retry",
        str(job_id),
        "--reason",
        "grader redeployed",
        "--reviewer",
        "ana",
        "--db",
        str(path),
    )
    assert "queued again" in out
    db = open_server_db(path)
    info = show_job(db, job_id)
    assert info["status"] == "queued"
    assert info["reviews"][0]["reviewer"] == "ana"
    invoke("jobs", "cancel", str(job_id), "--reason", "answer withdrawn", "--db", str(path))
    assert show_job(db, job_id)["status"] == "cancelled"
    assert records.get(db, rid)["obligations"]["grading"]["status"] == "cancelled"
    result = runner.invoke(
        app,
        env={"COLUMNS": "200"},
        args=["jobs", "retry", str(job_id), "--reason", "x", "--db", str(path)],
    )
    assert result.exit_code == 1 and "cannot retry" in result.output


def test_jobs_needs_an_existing_db(tmp_path: Path) -> None:
    result = runner.invoke(
        app, env={"COLUMNS": "200"}, args=["jobs", "list", "--db", str(tmp_path / "nope.db")]
    )
    assert result.exit_code != 0 and "no such database" in result.output


def test_worker_refuses_bad_queue_spec(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        env={"COLUMNS": "200"},
        args=["worker", "--db", str(tmp_path / "w.db"), "--queue", "grading"],
    )
    assert result.exit_code != 0 and "NAME=MAX or NAME=MIN:MAX" in result.output
    result = runner.invoke(
        app,
        env={"COLUMNS": "200"},
        args=["worker", "--db", str(tmp_path / "w.db"), "--queue", "grading=99"],
    )
    assert result.exit_code != 0 and "outside its budget" in result.output


def test_jobs_list_refuses_an_unknown_status(failed_db: tuple[Path, int, str]) -> None:
    # A typo must not read as "no such jobs": "0 jobs" for --status faild would tell an
    # operator the failed store is empty.
    path, _, _ = failed_db
    result = runner.invoke(
        app, env={"COLUMNS": "200"}, args=["jobs", "list", "--status", "faild", "--db", str(path)]
    )
    assert result.exit_code != 0 and "faild" in result.output
    listed = invoke("jobs", "list", "--status", "failed", "--db", str(path))
    assert listed.splitlines()[0].strip() == "1 job"  # the title, in the singular


def test_jobs_list_counts_attempts_within_the_current_budget(
    failed_db: tuple[Path, int, str],
) -> None:
    # After a reviewed retry the job has a fresh budget: its first new attempt is 1 of 1
    # (2 in all), not "2/1", which reads as over its limit.
    path, job_id, _ = failed_db
    invoke("jobs", "retry", str(job_id), "--reason", "fixed", "--db", str(path))
    db = open_server_db(path)
    (job,) = JobManager(db).lease_jobs("grading", "w", 1, lease=10)
    JobManager(db).finish([AttemptOutcome(job, RuntimeError("still broken"))])
    out = invoke("jobs", "failed", "--db", str(path))
    assert "1/1 (2)" in out and "2/1" not in out
