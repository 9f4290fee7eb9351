"""Chaos: thousands of operations through every network fault, client and server SIGKILLed.

At the end the server's effect ledger holds every queued operation exactly once, each
entity's operations were applied in the order they were made, no edit the client was told
had been stored was lost, and the notes are exactly what the plan of edits produces.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.reference.faultproxy import FAULT_KINDS, FaultPlan, FaultProxy
from tests.integrations.django_notes import DjangoNotes
from tests.processes import ServerProcess

sys.path.insert(0, str(Path(__file__).parent))
from chaos_client import plan
from tests import processes

ENTITIES, SEED = 60, 11
# The chaos run is the batch one; the concurrent one (a request per operation,
# about twice the wall time per operation) runs half as many to keep the suite short.
# The Django example (a transaction per operation, Django's request cycle) runs fewer.
OPS = {
    ("pigeon_serve", "batches"): 5000,
    ("pigeon_serve", "concurrent"): 2500,
    ("django_notes", "batches"): 1500,
    ("django_notes", "concurrent"): 1000,
}
CLIENT_KILLS, SERVER_KILLS = 10, 3
CLIENT = str(Path(__file__).parent / "chaos_client.py")


def _expected_notes(steps: list[tuple[str, str, dict[str, Any]]]) -> dict[str, dict[str, str]]:
    state: dict[str, dict[str, str]] = {}
    for kind, entity, payload in steps:
        note = entity.split(":", 1)[1]
        if kind == "delete":
            state.pop(note, None)
        else:
            state[note] = {"title": payload["title"], "body": payload["body"]}
    return state


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["batches", "concurrent"])
@pytest.mark.parametrize("kind", ["pigeon_serve", "django_notes"])
def test_chaos_exactly_once_in_order(tmp_path: Path, kind: str, mode: str) -> None:
    """``batches``: batch requests of 10, one at a time. ``concurrent``: single requests,
    four on the wire (server group commit) and two engine batches on the way. The server
    is ``pigeon serve``'s reference app, or the Django example (its effect ledger is a
    table of its own, written by its views under ``@idempotent``)."""
    rng = random.Random(SEED)
    edge_db, log = tmp_path / "edge.db", tmp_path / "enqueued.log"
    made = DjangoNotes if kind == "django_notes" else ServerProcess
    server = made(tmp_path / "server.db", allow_anonymous=True).start()
    ops = OPS[kind, mode]
    plan_ = FaultPlan.uniform(0.25, max_delay=0.02, seed=SEED)
    proxy = FaultProxy(server.url, plan_).start()

    def run_client() -> subprocess.Popen[bytes]:
        args = [sys.executable, CLIENT, str(edge_db), str(log), proxy.url]
        return processes.spawn([*args, str(ops), str(ENTITIES), str(SEED), mode])

    stop_killing = threading.Event()

    def kill_server() -> None:
        for _ in range(SERVER_KILLS):
            if stop_killing.wait(rng.uniform(1.0, 3.0)):
                return
            server.kill()
            time.sleep(0.2)  # the server is down: the client must wait it out
            server.start()

    killer = threading.Thread(target=kill_server, daemon=True)
    killer.start()
    client_kills = 0
    try:
        client = run_client()
        while client_kills < CLIENT_KILLS:
            time.sleep(rng.uniform(0.2, 0.9))  # 10 kills within ~6 s of an ~18 s run
            if client.poll() is not None:
                break  # finished before we could kill it again
            os.kill(client.pid, signal.SIGKILL)
            client.wait()
            client_kills += 1
            client = run_client()
        killer.join(30)
        assert client.wait(240) == 0
    finally:
        stop_killing.set()
        proxy.stop()
    try:
        _check(server, edge_db, log, proxy.counts, client_kills, server.kills, ops)
    finally:
        server.stop()


def _check(
    server: ServerProcess,
    edge_db: Path,
    log: Path,
    counts: Any,
    client_kills: int,
    server_kills: int,
    ops_made: int,
) -> None:
    assert client_kills >= CLIENT_KILLS, "the client finished before it was killed enough"
    assert server_kills >= SERVER_KILLS
    for kind in FAULT_KINDS:
        assert counts[kind] >= 0.10 * counts["requests"], (kind, dict(counts))
    lines = log.read_text().split()
    assert lines[-1] == "drained"
    logged = [int(x) for x in lines if x.isdigit()]
    assert sorted(set(logged)) == list(range(ops_made)), "an enqueue was skipped or repeated"

    queue = OfflineQueue(edge_db)
    ops = queue.operations(limit=10**7)
    stats = queue.stats()
    queue.close()
    assert (stats.depth, stats.dead, stats.conflicts) == (0, 0, 0)
    assert all(op.status is OpStatus.DELIVERED for op in ops)
    by_key = {op.idempotency_key: op for op in ops}

    url, operator = server.url, server.operator_headers
    reply = httpx.get(url + "/pigeon/v1/ledger", params={"limit": 10**7}, headers=operator)
    ledger = reply.json()["entries"]
    applied = [row["idempotency_key"] for row in ledger]
    assert len(applied) == len(set(applied)), "an operation took effect twice"
    assert set(applied) == set(by_key), "an operation was lost (or an unknown one applied)"

    order: dict[str, list[int]] = defaultdict(list)
    for row in ledger:
        op = by_key[row["idempotency_key"]]
        order[op.entity].append(op.seq)
    for entity, seqs in order.items():
        assert seqs == sorted(seqs), f"{entity} applied out of order"

    notes = httpx.get(url + "/notes").json()["notes"]
    got = {n["id"]: {"title": n["data"]["title"], "body": n["data"]["body"]} for n in notes}
    assert got == _expected_notes(plan(ops_made, ENTITIES, SEED))
    assert len(ledger) == ops_made  # every operation of the plan went through on its own
    print(f"chaos: {len(ops)} operations queued, {len(ledger)} effects, {dict(counts)}")
