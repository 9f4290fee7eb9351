"""Worker processes SIGKILLed at random moments: nothing lost, no effect applied twice."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.jobs.supervisor import Supervisor, WorkerOptions
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

JOBS = 2400
ROUNDS = 20


def _wait_for_lease(db: Database, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list_jobs(db, status="reserved", limit=1):
            return True
        time.sleep(0.02)
    return False


def _open_jobs(db: Database) -> bool:
    """Is any job still queued or leased? (Two one-row reads: listing all 2,400 jobs at
    every poll took the CPU the workers draining them needed.)"""
    return any(list_jobs(db, status=status, limit=1) for status in ("queued", "reserved"))


@pytest.mark.chaos
def test_sigkill_rounds_leave_every_effect_exactly_once(server_db_url: str) -> None:
    path = server_db_url
    db = open_server_db(path, durability="normal")
    with db.transaction() as tx:
        for n in range(JOBS):
            enqueue(tx, JobSpec("chaos", "bump", {"n": n, "pause": 0.004}, max_attempts=25))
    sup = Supervisor(
        "tests.jobs.chaos_app:app",
        path,
        {"chaos": 4},
        processes=2,
        options=WorkerOptions(durability="normal", batch=4, prefetch=4, schedules=False),
    )
    rng = random.Random(2024)
    sup.start()
    # The first children take their time to import and claim on a loaded machine (over the
    # 5 s a round waits): the rounds start once one of them works, so each kill can land.
    assert _wait_for_lease(db, timeout=60), "no worker leased a job within 60 s"
    kills = mid_work = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < 90:
            sup.check()
            if kills >= ROUNDS:
                # the rounds are done: the survivors drain the rest, no more kills
                if not _open_jobs(db):
                    break
                time.sleep(0.1)
                continue
            time.sleep(rng.uniform(0.15, 0.45))
            # Kill only while some job is leased: on a loaded machine a child relaunched by the
            # last round may still be importing, and a kill that lands on no lease proves nothing.
            leased = _wait_for_lease(db)
            pid = rng.choice(sup.pids())
            os.kill(pid, signal.SIGKILL)
            kills += 1
            mid_work += leased
            # give the children time to come back before the next round
            sup.check()
    finally:
        sup.stop(grace=5)
    # drain what the last kill left behind with one clean pass
    sup2 = Supervisor(
        "tests.jobs.chaos_app:app",
        path,
        {"chaos": 2},
        processes=1,
        options=WorkerOptions(durability="normal", schedules=False),
    )
    sup2.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not _open_jobs(db):
                break
            time.sleep(0.2)
    finally:
        sup2.stop(grace=5)

    jobs = list_jobs(db, limit=JOBS + 10)
    assert kills >= ROUNDS
    assert mid_work >= ROUNDS, f"only {mid_work} kills landed while jobs were leased"
    assert len(jobs) == JOBS
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[job["status"]] = by_status.get(job["status"], 0) + 1
    refused = sum(1 for n in range(JOBS) if n % 250 == 7)
    assert by_status == {"succeeded": JOBS - refused, "failed": refused}
    assert all(j["owner"] == "chaos-team" for j in jobs if j["status"] == "failed")
    # the kills really landed mid-work: leased jobs were rescued and run again
    assert sum(j["attempts"] for j in jobs) > JOBS
    with db.transaction() as tx:
        rows = tx.fetchall("outbox_pending", {"limit": JOBS * 3})
    topics = [r["topic"] for r in rows]
    assert len(topics) == len(set(topics)) == JOBS - refused  # every effect exactly once
    with db.transaction() as tx:
        attempts = tx.fetchall("job_service_times", {"queue": "chaos", "limit": JOBS * 3})
    assert len(attempts) == JOBS - refused
    db.close()
