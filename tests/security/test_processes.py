"""Item 10 from outside, as deployed: a SIGKILLed supervisor (``pigeon serve --workers 2``,
``pigeon worker``) leaves no child serving or claiming jobs, on both backends; and each
worker replaced is one line in the log at the default level."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from pigeon.jobs.failed import list_jobs
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import wait_for

from .conftest import Deployed, serve


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` and that multiprocessing spawned."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_sigkilled_server_leaves_no_worker_serving(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else str(tmp_path / "s.db")
    proc, url, _ = serve(db, tmp_path, "--workers", "2")
    try:
        wait_for(lambda: len(_children(proc.pid)) == 2, 30, "two workers", interval=0.05)
        workers = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # the supervisor alone, not its group
        proc.wait(10)
        wait_for(lambda: not any(map(_alive, workers)), 10, "the workers to end", interval=0.05)
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/pigeon/v1/health", timeout=1)
    finally:
        processes.stop(proc)


def test_a_sigkilled_worker_supervisor_leaves_no_child_claiming(
    deployed: Deployed, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"  # the deployed server's (serve() made it there)
    args = ["--db", deployed.db, "--keys-file", str(keys), "--queue", "grading=1"]
    supervisor = processes.spawn(
        [sys.executable, "-m", "pigeon", "worker", *args, "--processes", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(_children(supervisor.pid)) == 1, 30, "a worker process", interval=0.05)
        [child] = _children(supervisor.pid)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(10)
        wait_for(lambda: not _alive(child), 10, "the orphaned worker to end", interval=0.05)
    finally:
        processes.stop(supervisor)
    reply = httpx.post(
        deployed.url + "/answers",
        json={"question": "q1", "answer": "4"},
        headers={"Idempotency-Key": str(uuid.uuid4())} | deployed.user("ada"),
        timeout=10,
    )
    assert reply.status_code == 202, reply.text
    time.sleep(2)  # an orphan claiming on would have taken it by now
    database = open_server_db(deployed.db, keyring=Keyring.from_file(keys))
    try:
        assert [job["task"] for job in list_jobs(database, status="queued")] == ["grade"]
    finally:
        database.close()
