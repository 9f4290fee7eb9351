"""A rolling deploy that changes a task's payload and adds a task, with real worker
processes on one database (SQLite, then PostgreSQL).

Generation 1 (``pigeon worker``, two processes) runs task ``tally`` at payload version 1.
Producers enqueue 2,000 jobs, 1,000 of each shape: first old payloads only, then both
(the intakes are being deployed too), a burst of old ones, then new ones only; the new
intakes also enqueue jobs of ``welcome``, a task only generation 2 has. While only
generation 1 runs, the new payloads and the new task's jobs wait (generation 1 neither
runs nor fails them), and the operations figures count them as waiting for a newer
worker. Generation 2 (version 2, with the upcaster and the new task) starts; generation 1
is SIGTERMed while it holds jobs, and finishes or hands them back. At the end every job
completed exactly once, generation 1 never ran a new payload, generation 2 ran old ones
through the upcaster and every job of the new task, and nothing is in the failed store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.jobs.registry import live_workers
from pigeon.jobs.stores import store_for
from pigeon.ops.queries import overview
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests import processes
from tests.jobs.deploy_app import TABLES, VERSION_ENV, make_app, payload, units
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
BATCH = 20
# (first n, last n + 1, the versions its producers write, in turn): old payloads only;
# both shapes; a burst of old ones (generation 1 is SIGTERMed while it works them, what
# it leaves is upcast by generation 2); new ones only.
PHASES = [(0, 300, (1,)), (300, 1100, (2, 1)), (1100, 1400, (1,)), (1400, 2000, (2,))]
JOBS = PHASES[-1][1]


def welcomes(n: int, version: int) -> bool:
    """Does the producer of job ``n`` also enqueue a ``welcome`` (the new intakes do)?"""
    return version == 2 and n % 5 == 0


WELCOMES = [
    n
    for first, last, versions in PHASES
    for n in range(first, last)
    if welcomes(n, versions[n % len(versions)])
]

pytestmark = pytest.mark.chaos


class Generation:
    """``pigeon worker`` at one payload version, in a process group of its own."""

    def __init__(self, url: str, version: int, log: Path) -> None:
        self.url, self.version, self.log = url, version, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Generation:
        args = [sys.executable, "-m", "pigeon", "worker", "--db", self.url, "--processes", "2"]
        args += ["--app", "tests.jobs.deploy_app:app", "--queue", "deploy=8"]
        env = {**os.environ, VERSION_ENV: str(self.version)}
        with self.log.open("ab") as log:
            self.proc = processes.spawn(args, cwd=ROOT, env=env, stdout=log, stderr=log)
        return self

    def stop(self, grace: float) -> float:
        """SIGTERM (the whole group, as a service manager does), then SIGKILL after
        ``grace``; how long the supervisor took to exit."""
        assert self.proc is not None
        started = time.monotonic()
        processes.stop(self.proc, grace=grace)
        return time.monotonic() - started


class Producer(threading.Thread):
    """Enqueues the jobs phase by phase, each phase once its event is set, in batches of
    ``BATCH`` per transaction, as the intakes of each version would."""

    def __init__(self, db: Database) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.go = [threading.Event() for _ in PHASES]
        self.done = threading.Event()
        self.apps = {v: make_app(v) for v in (1, 2)}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for event, (first, last, versions) in zip(self.go, PHASES, strict=True):
                event.wait()
                for start in range(first, last, BATCH):
                    with self.db.transaction() as tx:
                        for n in range(start, min(start + BATCH, last)):
                            v = versions[n % len(versions)]
                            spec = JobSpec("deploy", "tally", payload(n, v))
                            enqueue(tx, spec, app=self.apps[v])
                            if welcomes(n, v):
                                welcome = JobSpec("deploy", "welcome", {"n": n})
                                enqueue(tx, welcome, app=self.apps[v])
                    time.sleep(0.01)
        except BaseException as exc:  # the test reports it
            self.error = exc
        finally:
            self.done.set()


def _count(db: Database, sql: str) -> int:
    with db.transaction() as tx:
        return int(tx.sql(f"SELECT count(*) AS n FROM ({sql}) AS t", {}).fetchone()["n"])


def _waiting_newer(db: Database, task: str = "tally") -> int:
    entries = overview(db, make_app(2), history=False)["versions"]["waiting"]
    return sum(e["waiting"] for e in entries if e["task"] == task)


def _workers_of(db: Database, version: int) -> list[str]:
    live = live_workers(store_for(db))
    return [w.name for w in live if w.versions.get("tally") == version]


def _held_by(db: Database, names: list[str]) -> int:
    listed = ", ".join(f"'{n}'" for n in names) or "''"
    return _count(
        db, f"SELECT 1 FROM pigeon_jobs WHERE status = 'reserved' AND worker IN ({listed})"
    )


def test_a_rolling_deploy_runs_every_job_once_old_payloads_upcast(
    server_db_url: str, tmp_path: Path
) -> None:
    db = open_server_db(server_db_url, durability="normal")
    with db.transaction() as tx:
        for statement in TABLES:
            tx.sql(statement)
    producer = Producer(db)
    producer.start()
    gen1 = Generation(server_db_url, 1, tmp_path / "gen1.log").start()
    gen2 = Generation(server_db_url, 2, tmp_path / "gen2.log")
    measured: dict[str, Any] = {}
    try:
        producer.go[0].set()  # old payloads only: generation 1 works them
        wait_for(
            lambda: _count(db, "SELECT 1 FROM deploy_effects") >= 100,
            90,
            "generation 1",
            interval=0.05,
        )
        producer.go[1].set()  # both shapes: the new ones wait, counted
        wait_for(
            lambda: _waiting_newer(db) > 0, 60, "a job waiting for a newer worker", interval=0.05
        )
        wait_for(
            lambda: _waiting_newer(db, "welcome") > 0, 60, "a new task's job waiting", interval=0.05
        )
        measured["waiting_newer_seen"] = _waiting_newer(db)
        measured["welcome_waiting_seen"] = _waiting_newer(db, "welcome")
        gen1_names = _workers_of(db, 1)
        assert len(gen1_names) == 2
        gen2.start()
        wait_for(
            lambda: len(_workers_of(db, 2)) == 2, 90, "generation 2 to advertise", interval=0.05
        )
        wait_for(
            lambda: _count(db, "SELECT 1 FROM deploy_effects WHERE generation = 2") >= 50,
            60,
            "generation 2 to work",
            interval=0.05,
        )
        # SIGTERM while generation 1 holds jobs: it finishes them or hands them back.
        producer.go[2].set()
        wait_for(
            lambda: _held_by(db, gen1_names) > 0, 30, "generation 1 to hold a job", interval=0.05
        )
        measured["gen1_stop_seconds"] = round(gen1.stop(grace=30), 2)
        measured["gen1_held_after_stop"] = _held_by(db, gen1_names)
        measured["gen1_still_advertised"] = len(_workers_of(db, 1))
        producer.go[3].set()
        wait_for(producer.done.is_set, 120, "the producers", interval=0.05)
        assert producer.error is None, producer.error
        wait_for(
            lambda: (
                _count(db, "SELECT 1 FROM pigeon_jobs WHERE status IN ('queued', 'reserved')") == 0
            ),
            240,
            "every job to finish",
            interval=0.05,
        )
    finally:
        for generation in (gen1, gen2):
            if generation.proc is not None:
                generation.stop(grace=30)
    for generation in (gen1, gen2):  # what the workers logged, shown if a check fails
        print(f"\n{generation.log.name}:\n{generation.log.read_text()[-4000:]}")
    _check(db, measured)
    db.close()


def _check(db: Database, measured: dict[str, Any]) -> None:
    with db.transaction() as tx:
        jobs = {
            (r["task"], r["status"], r["version"]): r["n"]
            for r in tx.sql(
                "SELECT task, status, version, count(*) AS n FROM pigeon_jobs "
                "GROUP BY task, status, version"
            ).fetchall()
        }
        effects = tx.sql("SELECT n, units, generation, enqueued FROM deploy_effects").fetchall()
        welcomed = tx.sql("SELECT n, generation FROM deploy_welcomed").fetchall()
        runs = {
            (r["generation"], r["enqueued"]): r["n"]
            for r in tx.sql(
                "SELECT generation, enqueued, count(*) AS n FROM deploy_runs "
                "GROUP BY generation, enqueued"
            ).fetchall()
        }
        attempts = tx.sql("SELECT sum(attempts) AS n FROM pigeon_jobs").fetchone()["n"]
    print(f"\nrolling deploy: jobs {jobs}, runs (generation, enqueued) {runs}, {measured}")
    # Generation 1 exited on its own: its supervisor kills a child still there at the end
    # of its grace (the lease, 15 s), which then leaves its rows to age out.
    assert measured["gen1_stop_seconds"] < 15
    assert jobs == {  # none failed
        ("tally", "succeeded", 1): 1000,
        ("tally", "succeeded", 2): 1000,
        ("welcome", "succeeded", 1): len(WELCOMES),
    }
    # The new task's jobs: each completed exactly once, by the generation that has it.
    assert sorted(w["n"] for w in welcomed) == WELCOMES
    assert {w["generation"] for w in welcomed} == {2}
    assert measured["welcome_waiting_seen"] > 0
    assert sorted(e["n"] for e in effects) == list(range(JOBS))  # each exactly once
    assert all(e["units"] == units(e["n"]) for e in effects)  # the upcast payload's too
    assert runs.get((1, 2), 0) == 0  # generation 1 never ran a new payload
    assert runs.get((2, 1), 0) > 0  # generation 2 ran old ones through the upcaster
    assert runs.get((1, 1), 0) > 0 and runs.get((2, 2), 0) > 0
    assert measured["waiting_newer_seen"] > 0
    # Generation 1 drained: nothing left held under its name, its rows withdrawn.
    assert measured["gen1_held_after_stop"] == 0
    assert measured["gen1_still_advertised"] == 0
    assert attempts >= JOBS
