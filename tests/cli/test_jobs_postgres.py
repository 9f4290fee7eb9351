"""Acceptance through the CLI on PostgreSQL: ``pigeon worker --db postgresql://...`` runs the
jobs, ``pigeon jobs list | failed | retry | cancel --db postgresql://...`` reviews them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.jobs import records
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import wait_for

runner = CliRunner()


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def wait_for_status(url: str, want: dict[str, int], timeout: float = 30.0) -> None:
    with contextlib.closing(open_server_db(url)) as db:

        def counts() -> Counter[str]:
            return Counter(job["status"] for job in list_jobs(db, limit=1000))

        wait_for(lambda: counts() == want, timeout, lambda: f"{want}, jobs are {counts()}", 0.05)


def test_worker_and_review_commands_on_postgres(pg_url: str) -> None:
    db = open_server_db(pg_url)
    with db.transaction() as tx:
        for n in range(20):
            records.accept(
                tx,
                kind="answer",
                data={"answer": "42", "expected": "42"},
                record_id=f"a{n}",
                obligations={"grading": JobSpec("grading", "grade", {"answer_id": f"a{n}"})},
            )
        # a job carrying more than its task declares (written without the app): it fails
        # at once into the failed store, before the task runs
        leaky = {"answer_id": "bad", "answer": "42"}
        broken = records.accept(
            tx,
            kind="answer",
            data={},
            obligations={"grading": JobSpec("grading", "grade", leaky, max_attempts=1)},
        )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    worker = processes.spawn(
        [sys.executable, "-m", "pigeon", "worker", "--db", pg_url, "--queue", "grading=4"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_status(pg_url, {"succeeded": 20, "failed": 1})
        listed = invoke("jobs", "list", "--db", pg_url, "--status", "succeeded")
        assert "20 jobs" in listed and "grading" in listed
        failed = invoke("jobs", "failed", "--db", pg_url)
        # a payload with an undeclared field is a permanent error, named as such
        assert "1 failed job awaiting" in failed and "grading-team" in failed
        assert "permanent" in failed
        (bad,) = list_jobs(db, status="failed")
        assert "does not declare payload field 'answer'" in show_job(db, bad["id"])["last_error"]
        # a reviewed retry goes back to the running worker (it fails again: same payload)
        out = invoke(
            "jobs",
            "retry",
            str(bad["id"]),
            "--reason",
            "grader patched",
            "--reviewer",
            "ana",
            "--db",
            pg_url,
        )
        assert "queued again" in out
        deadline = time.monotonic() + 10
        while show_job(db, bad["id"])["attempts"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        wait_for_status(pg_url, {"succeeded": 20, "failed": 1})
        invoke("jobs", "cancel", str(bad["id"]), "--reason", "answer withdrawn", "--db", pg_url)
        info = show_job(db, bad["id"])
        assert info["status"] == "cancelled"
        assert [r["action"] for r in info["reviews"]] == ["retry", "cancel"]
        assert records.get(db, broken)["obligations"]["grading"]["status"] == "cancelled"
        result = runner.invoke(
            app,
            ["jobs", "retry", str(bad["id"]), "--reason", "x", "--db", pg_url],
            env={"COLUMNS": "200"},
        )
        assert result.exit_code == 1 and "cannot retry" in result.output
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
        db.close()
    assert worker.returncode == 0, output
    assert "2 processes" in output
