"""Crash test: SIGKILL a process that enqueues and drains, at random moments, many times.

After every kill the file opens cleanly; every enqueue the child reported as returned is
present exactly once (pending or delivered), with its key unchanged; per-entity order is
intact and deliveries never overtook an earlier operation of the same entity.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.queue import OfflineQueue
from tests import processes

CHILD = Path(__file__).with_name("crash_child.py")
ROUNDS = 24


@pytest.mark.chaos
@pytest.mark.timeout(120)
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    rng = random.Random(20240611)
    reported: dict[int, tuple[str, str, str]] = {}  # n -> (id, key, entity)
    exact: set[int] = set()  # enqueues made without coalescing: must each be one row
    for round_ in range(ROUNDS):
        coalesce = coalescing_round(round_ * 10_000_000)
        child = processes.spawn(
            [
                sys.executable,
                str(CHILD),
                str(path),
                str(round_ * 10_000_000),
                str(round_),
                "1" if coalesce else "0",
            ],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        # The kill's random moment counts from the child's first reported enqueue, not from
        # its spawn: on a loaded machine the interpreter alone can take a second to start,
        # and kills that land before any work prove nothing.
        assert child.stdout is not None
        first = child.stdout.readline()
        time.sleep(rng.uniform(0.1, 0.9))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        for line in (first + out).decode().splitlines(keepends=True):
            if not line.endswith("\n"):
                continue  # cut short by the kill: not reported
            n, op_id, key, entity = line.split()
            reported[int(n)] = (op_id, key, entity)
            if not coalesce:
                exact.add(int(n))
        check(path, reported, exact)
    assert len(reported) > 500, "the child should have made real progress"
    print(f"{ROUNDS} kills, {len(reported)} reported enqueues checked")


def coalescing_round(n: int) -> bool:
    return (n // 10_000_000) % 3 == 2


def check(path: Path, reported: dict[int, tuple[str, str, str]], exact: set[int]) -> None:
    with OfflineQueue(path) as queue:  # opens cleanly, puts in-flight back to pending
        ops = queue.operations(limit=10**9)
        assert queue.stats().in_flight == 0
    by_id = {op.id: op for op in ops}
    ns = [op.payload["n"] for op in ops]
    assert len(ns) == len(set(ns)), "an enqueue was stored twice"
    stored_n = set(ns)
    for n, (op_id, key, entity) in reported.items():
        op = by_id.get(op_id)
        assert op is not None, f"reported enqueue {n} ({op_id}) is missing"
        assert op.idempotency_key == key, f"key of {op_id} changed"
        assert op.entity == entity
        # Folded into by a later edit (only in a coalescing round): that edit carries it.
        folded = op.payload["n"] > n and coalescing_round(op.payload["n"])
        if n in exact:
            assert n in stored_n or folded, f"reported enqueue {n} lost its payload"
        else:
            assert op.payload["n"] >= n
    for entity in {op.entity for op in ops}:
        mine = [op for op in ops if op.entity == entity]  # queue (seq) order
        payloads = [op.payload["n"] for op in mine]
        assert payloads == sorted(payloads), f"order of {entity} broken"
        delivered = [op.status is OpStatus.DELIVERED for op in mine]
        assert delivered == sorted(delivered, reverse=True), f"{entity} delivered out of order"
        assert all(op.status in (OpStatus.DELIVERED, OpStatus.PENDING) for op in mine)
