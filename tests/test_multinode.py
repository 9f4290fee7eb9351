"""Multi-node on PostgreSQL: 2 intake processes and 3 worker nodes share one database.

20 offline queues (in 4 client processes, each queue pointed at one of the two intakes
through its own fault proxy) send 10,000 operations — notes created and replaced, and
answers whose grading and notification are jobs — while intakes and worker nodes are
SIGKILLed at random moments and started again. At the end every operation took effect
exactly once (the notes' effect ledger, one record per answer), each note's operations
were applied in the order they were made, and every job either succeeded, its effect
applied once, or sits in the failed store with an owner.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.reference.faultproxy import FaultPlan, FaultProxy
from pigeon.storage.server import open_server_db
from tests import processes
from tests.processes import ServerProcess

HERE = Path(__file__).parent
CLIENT_PROCESSES, QUEUES_PER_PROCESS, OPS_PER_QUEUE, SEED = 4, 5, 500, 23
QUEUES = CLIENT_PROCESSES * QUEUES_PER_PROCESS
INTAKE_KILLS, WORKER_KILLS = 3, 3
WORKER_ARGS = ["--app", "tests.multinode_app:app", "--queue", "grading=2", "--queue", "notify=1"]

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]


class WorkerNode:
    """``pigeon worker`` in its own session: a SIGKILL of the group is a node dying."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> WorkerNode:
        args = [sys.executable, "-m", "pigeon", "worker", "--db", self.url, "--processes", "1"]
        with self.log.open("ab") as log:
            self.proc = processes.spawn(
                [*args, *WORKER_ARGS],
                cwd=HERE.parent,
                stdout=log,
                stderr=log,
            )
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc, grace=0)
            self.kills += 1

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc, grace=15)


def _killer(
    rng: random.Random,
    intakes: list[ServerProcess],
    workers: list[WorkerNode],
    stop: threading.Event,
) -> None:
    """Kill an intake or a node every second or so, alternately, until told to stop and
    each kind has had its quota: when the clients finish early (a fast run), the last
    kills land while the worker nodes are still draining the jobs."""
    turn = 0

    def quota_met() -> bool:
        intake_kills = sum(s.kills for s in intakes)
        return intake_kills >= INTAKE_KILLS and sum(w.kills for w in workers) >= WORKER_KILLS

    while True:
        time.sleep(rng.uniform(0.5, 1.5))
        if stop.is_set() and quota_met():
            return
        victims: list[Any] = intakes if turn % 2 == 0 else workers
        victim = rng.choice(victims)
        victim.kill()
        time.sleep(rng.uniform(0.1, 0.5))  # down for a moment: clients and jobs wait it out
        victim.start()
        turn += 1


def _wait_for_jobs(url: str, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(url) as conn:
            counts = dict(conn.execute("SELECT status, count(*) FROM pigeon_jobs GROUP BY status"))
        if not counts.keys() & {"queued", "reserved"} or time.monotonic() > deadline:
            return counts
        time.sleep(0.25)


def test_multinode_exactly_once_under_sigkill(pg_url: str, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    open_server_db(pg_url).close()  # migrate once, before anyone races
    intakes = [ServerProcess(pg_url, allow_anonymous=True).start() for _ in range(2)]
    plan = FaultPlan(0.05, 0.05, 0.05, 0.05, 0.05, max_delay=0.02, seed=SEED)
    proxies = [FaultProxy(server.url, plan).start() for server in intakes]
    workers = [WorkerNode(pg_url, tmp_path / f"worker{i}.log").start() for i in range(3)]
    stop = threading.Event()
    killer = threading.Thread(target=_killer, args=(rng, intakes, workers, stop), daemon=True)
    started = time.monotonic()
    try:
        killer.start()
        clients = [
            processes.spawn(
                [
                    sys.executable,
                    str(HERE / "multinode_client.py"),
                    str(tmp_path),
                    ",".join(p.url for p in proxies),
                    str(i * QUEUES_PER_PROCESS),
                    str(QUEUES_PER_PROCESS),
                    str(OPS_PER_QUEUE),
                    str(SEED),
                ],
                cwd=HERE.parent,
            )
            for i in range(CLIENT_PROCESSES)
        ]
        assert [c.wait(150) for c in clients] == [0] * CLIENT_PROCESSES
        sent = time.monotonic() - started
        stop.set()
        killer.join(60)
        jobs = _wait_for_jobs(pg_url, 60)
    finally:
        stop.set()
        for node in workers:
            node.stop()
        for proxy in proxies:
            proxy.stop()
        for server in intakes:
            server.stop()
    kills = (sum(s.kills for s in intakes), sum(w.kills for w in workers))
    print(f"multinode: sent in {sent:.1f} s, jobs {jobs}, kills (intake, node) {kills}")
    print(f"faults: {[dict(p.counts) for p in proxies]}")
    assert kills[0] >= INTAKE_KILLS and kills[1] >= WORKER_KILLS, kills
    _check(pg_url, tmp_path, jobs)


def test_serve_with_two_worker_processes_on_postgres(pg_url: str) -> None:
    """`pigeon serve --db postgresql://... --workers 2` (each process opens its own pool):
    one key sent 20 times concurrently is one effect, 40 other keys are 40."""
    with ServerProcess(pg_url, extra_args=["--workers", "2"], allow_anonymous=True) as server:

        def send(i: int) -> httpx.Response:
            key = "same" if i % 3 == 0 else f"k{i}"
            with httpx.Client(base_url=server.url, timeout=30) as client:
                return client.post("/notes", json={"id": key}, headers={"Idempotency-Key": key})

        with ThreadPoolExecutor(max_workers=20) as pool:
            responses = list(pool.map(send, range(60)))
    assert [r.status_code for i, r in enumerate(responses) if i % 3] == [201] * 40
    same = [r for i, r in enumerate(responses) if i % 3 == 0]
    # A duplicate that meets the original still in progress is told so (409, either
    # process: within the claim's bounded wait); the others replay it.
    assert {r.status_code for r in same} <= {201, 409}
    assert all(r.headers["retry-after"] for r in same if r.status_code == 409)
    created = [r for r in same if r.status_code == 201]
    assert len({r.content for r in created}) == 1
    assert sum(r.headers.get("idempotent-replayed") != "true" for r in created) == 1
    with psycopg.connect(pg_url) as conn:
        keys = [k for (k,) in conn.execute("SELECT idempotency_key FROM ref_effect_ledger")]
    assert sorted(keys) == sorted({"same"} | {f"k{i}" for i in range(60) if i % 3})


def _edge_operations(tmp_path: Path) -> list[Any]:
    ops = []
    for q in range(QUEUES):
        queue = OfflineQueue(tmp_path / f"q{q}.db")
        try:
            stats = queue.stats()
            assert (stats.depth, stats.dead, stats.conflicts) == (0, 0, 0), (q, stats)
            ops += queue.operations(limit=10**6)
        finally:
            queue.close()
    return ops


def _check(url: str, tmp_path: Path, jobs: dict[str, int]) -> None:
    ops = _edge_operations(tmp_path)
    assert len(ops) == QUEUES * OPS_PER_QUEUE >= 10_000
    assert all(op.status is OpStatus.DELIVERED for op in ops)
    by_key = {op.idempotency_key: op for op in ops}
    notes = [op for op in ops if op.entity.startswith("note:")]
    answers = [op for op in ops if op.entity.startswith("answer:")]

    with psycopg.connect(url) as conn:
        ledger = conn.execute("SELECT idempotency_key, entity FROM ref_effect_ledger ORDER BY seq")
        ledger_rows = ledger.fetchall()
        records = [json.loads(d) for (d,) in conn.execute("SELECT data FROM pigeon_records")]
        final = dict(conn.execute("SELECT id, data FROM ref_notes"))
        marks = Counter(topic for (topic,) in conn.execute("SELECT topic FROM pigeon_outbox"))
        succeeded = conn.execute(
            "SELECT task, payload, record_id FROM pigeon_jobs WHERE status = 'succeeded'"
        ).fetchall()
        unowned = conn.execute(
            "SELECT count(*) FROM pigeon_jobs WHERE status = 'failed' AND owner IS NULL"
        ).fetchone()

    applied = [key for key, _ in ledger_rows]
    assert len(applied) == len(set(applied)), "a note operation took effect twice"
    assert set(applied) == {op.idempotency_key for op in notes}, "a note operation was lost"
    order: dict[str, list[int]] = defaultdict(list)
    for key, _ in ledger_rows:
        order[by_key[key].entity].append(by_key[key].seq)
    assert all(seqs == sorted(seqs) for seqs in order.values()), "applied out of order"
    last = {op.entity: op.payload for op in sorted(notes, key=lambda op: op.seq)}
    assert {f"note:{k}": json.loads(v)["body"] for k, v in final.items()} == {
        entity: body["body"] for entity, body in last.items()
    }

    questions = Counter(r["question"] for r in records)
    assert max(questions.values()) == 1, "an answer was recorded twice"
    assert set(questions) == {op.payload["question"] for op in answers}, "an answer was lost"

    assert set(jobs) <= {"succeeded", "failed"}, jobs
    assert jobs.get("failed", 0) > 0 and unowned == (0,)  # the refused answers, owned
    refused = sum(op.payload["answer"] == "refuse me" for op in answers)
    assert jobs["failed"] == refused
    for task, payload, _record in succeeded:
        args = json.loads(payload)
        topic = f"{'graded' if task == 'grade' else 'notified'}:{args['answer_id']}"
        assert marks[topic] == 1, f"{task} job for {topic} applied {marks[topic]} times"
