"""Issue 21, item 13, replayed from outside on both backends: lifecycle events were silent
at the default level. A ``pigeon worker`` process recycled, one SIGKILLed, and a ``pigeon
serve --workers 2`` worker SIGKILLed, and a relay taking over the outbox's lock from one
SIGKILLed are each one line at the default level (at WARNING), and the service goes on."""

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

from tests import processes
from tests.conftest import require_broker
from tests.waiting import until_answers, wait_for

from .conftest import Deployed, serve


def children(pid: int) -> list[int]:
    """The multiprocessing children of ``pid``, alive."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if int(stat[1]) == pid and stat[0] != "Z" and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def answer(deployed: Deployed) -> None:
    """A graded answer: one job on the ``grading`` queue."""
    reply = httpx.post(
        deployed.url + "/answers",
        json={"question": "q1", "answer": "4"},
        headers={"Idempotency-Key": str(uuid.uuid4())} | deployed.user("ada"),
        timeout=10,
    )
    assert reply.status_code == 202, reply.text


def test_a_worker_recycled_or_killed_is_one_line_at_the_default_level(
    deployed: Deployed, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"  # the deployment's (serve() made it there)
    args = ["--db", deployed.db, "--keys-file", str(keys), "--queue", "grading=1"]
    args += ["--processes", "1", "--recycle-jobs", "1"]
    log = tmp_path / "worker.log"
    with log.open("w") as err:  # no --log-level: the default
        supervisor = processes.spawn(
            [sys.executable, "-m", "pigeon", "worker", *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(lambda: len(children(supervisor.pid)) == 1, 30, "a worker process", interval=0.05)
        [first] = children(supervisor.pid)
        answer(deployed)  # its one job, then it is recycled
        wait_for(
            lambda: children(supervisor.pid) not in ([], [first]),
            60,
            "the recycled worker replaced",
            interval=0.05,
        )
        [second] = children(supervisor.pid)
        os.kill(second, signal.SIGKILL)
        wait_for(
            lambda: children(supervisor.pid) not in ([], [second]),
            30,
            "the killed worker replaced",
            interval=0.05,
        )
    finally:
        processes.stop(supervisor)
    lines = log.read_text().splitlines()
    recycled = [line for line in lines if f"worker {first} recycled after" in line]
    killed = [line for line in lines if f"worker {second} exited with -9" in line]
    assert len(recycled) == 1 and len(killed) == 1, lines
    assert "replacing it" in recycled[0] and "replacing it" in killed[0]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_serve_worker_replaced_is_one_line_at_the_default_level(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else str(tmp_path / "s.db")
    # As deployed, but at the default level (the last --log-level given wins).
    proc, url, log = serve(db, tmp_path, "--workers", "2", "--log-level", "warning")
    try:
        wait_for(lambda: len(children(proc.pid)) == 2, 30, "two workers", interval=0.05)
        victim = children(proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: len(set(children(proc.pid)) - {victim}) == 2,
            30,
            "the worker replaced",
            interval=0.05,
        )
        until_answers(url + "/pigeon/v1/health")
    finally:
        processes.stop(proc)
    lines = [line for line in log.read_text().splitlines() if f"worker {victim} died" in line]
    assert len(lines) == 1 and "replaced by worker" in lines[0], log.read_text()[-3000:]


def test_a_relay_taking_over_the_lock_says_so_at_the_default_level(
    deployed: Deployed, tmp_path: Path
) -> None:
    """Two ``pigeon relay`` on the deployment's outbox: one publishes, one stands by; the
    first SIGKILLed, the second takes over the lock and says so in one line."""
    broker = require_broker("redis") + f"?prefix=audit-{uuid.uuid4().hex[:8]}"
    args = [sys.executable, "-m", "pigeon", "relay", "--db", deployed.db, "--to", broker]
    args += ["--keys-file", str(tmp_path / "keys.json")]
    logs = [tmp_path / "relay-1.log", tmp_path / "relay-2.log"]
    relays = []
    try:
        for log in logs:  # no --log-level: the default
            if relays:
                time.sleep(3)  # the first holds the lock before the second asks
            with log.open("w") as err:
                relays.append(processes.spawn(args, stdout=subprocess.DEVNULL, stderr=err))
        wait_for(
            lambda: "standing by" in logs[1].read_text(),
            30,
            "the second to stand by",
            interval=0.05,
        )
        os.kill(relays[0].pid, signal.SIGKILL)
        wait_for(
            lambda: "took over the relay lock" in logs[1].read_text(),
            30,
            "the take-over",
            interval=0.05,
        )
    finally:
        for relay in relays:
            processes.stop(relay)
    assert "took over" not in logs[0].read_text()
    took = [line for line in logs[1].read_text().splitlines() if "took over the relay lock" in line]
    assert len(took) == 1, took
