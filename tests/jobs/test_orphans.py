"""A worker process ends with its supervisor (pigeon.orphans): SIGKILL of ``pigeon worker``
leaves no child claiming jobs, the job it was running is run once, and another worker
runs the rest; the heartbeat's parent check stops a worker whose parent is gone even
where the kernel sends no signal."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from pigeon import jobs
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import Worker
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import wait_for

JOBS = 6
TIMEOUTS = Timeouts(job=4)  # lease 9 s
ORPHAN_APP = """
import os, time
from pathlib import Path
from pigeon import jobs
from pigeon.jobs.timeouts import Timeouts

RUNS = Path(os.environ["ORPHAN_RUNS"])
app = jobs.App()
app.queue("orphans", max_workers=2, timeouts=Timeouts(job=4))


@app.task(queue="orphans")
def work(n):
    with RUNS.open("a") as out:
        out.write(f"start {n} {os.getpid()}\\n")
    time.sleep(1.0)
    with RUNS.open("a") as out:
        out.write(f"done {n} {os.getpid()}\\n")
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _worker(db: str, tmp_path: Path, runs: Path, log: Path) -> subprocess.Popen[bytes]:
    args = ["--db", db, "--app", "orphanapp:app", "--queue", "orphans=1", "--processes", "1"]
    with log.open("ab") as out:
        return processes.spawn(
            [sys.executable, "-m", "pigeon", "worker", *args],
            cwd=tmp_path,
            env=os.environ | {"ORPHAN_RUNS": str(runs), "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=out,
        )


def _runs(runs: Path) -> list[tuple[str, int, int]]:
    lines = runs.read_text().splitlines() if runs.exists() else []
    return [(kind, int(n), int(pid)) for kind, n, pid in (line.split() for line in lines)]


@pytest.mark.chaos
def test_sigkill_of_the_supervisor_ends_its_worker_and_every_job_runs_once(
    server_db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "orphanapp.py").write_text(ORPHAN_APP)
    db = open_server_db(server_db_url)
    try:
        ids = [JobManager(db).enqueue(JobSpec("orphans", "work", {"n": n})) for n in range(JOBS)]
        runs, log = tmp_path / "runs", tmp_path / "worker.log"
        supervisor = _worker(server_db_url, tmp_path, runs, log)
        wait_for(lambda: _runs(runs), 60, "a job to start", interval=0.05)
        child = _runs(runs)[0][2]
        assert child != supervisor.pid and _alive(child)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(10)
        killed = time.monotonic()
        wait_for(
            lambda: not _alive(child),
            killed + TIMEOUTS.lease_seconds - time.monotonic(),
            "the orphaned worker to end",
            interval=0.05,
        )
        rescuer = _worker(server_db_url, tmp_path, runs, log)
        try:
            done = lambda: len(list_jobs(db, status="succeeded")) == JOBS  # noqa: E731
            wait_for(done, 90, "every job to succeed", interval=0.05)
        finally:
            processes.stop(rescuer)
        assert {job["id"] for job in list_jobs(db, status="succeeded")} == set(ids)
    finally:
        db.close()
    counts = Counter((kind, n) for kind, n, _ in _runs(runs))
    assert all(counts[("start", n)] == counts[("done", n)] == 1 for n in range(JOBS)), counts
    assert {pid for _, _, pid in _runs(runs)} - {child}, "the rescuer ran the rest"


def _orphan_app() -> jobs.App:
    app = jobs.App()
    app.queue("orphans", timeouts=TIMEOUTS)

    @app.task(queue="orphans")
    def work(n: int) -> None:
        pass

    return app


@pytest.mark.parametrize("parent_alive", [True, False])
def test_the_heartbeat_stops_a_worker_whose_parent_is_gone(
    server_db_url: str, caplog: pytest.LogCaptureFixture, parent_alive: bool
) -> None:
    """Where no signal comes (not Linux, or a child started from a passing thread), the
    heartbeat sees the parent gone: no more claims, a graceful stop, one warning line."""
    db = open_server_db(server_db_url)
    options = WorkerOptions(schedules=False, maintenance=False)
    # Not its parent: this very process. Its real parent: alive throughout.
    parent = os.getppid() if parent_alive else os.getpid()
    worker = Worker(_orphan_app(), db, {"orphans": 1}, options, parent=parent)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run(grace=5)), daemon=True)
    try:
        with caplog.at_level(logging.WARNING, logger="pigeon"):
            thread.start()
            thread.join(3)
            assert thread.is_alive() is parent_alive
    finally:  # stopped before its database is closed, whatever the assertion said
        worker.stop()
        thread.join(10)
        db.close()
    gone = [r for r in caplog.records if "is gone" in r.getMessage()]
    assert codes == [0] and len(gone) == (0 if parent_alive else 1)
    assert all(r.levelno == logging.WARNING for r in gone)
