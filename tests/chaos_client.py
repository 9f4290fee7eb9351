"""The client process of the chaos test: enqueue a fixed plan, sync, survive SIGKILL.

Usage: python chaos_client.py EDGE_DB LOG PROXY_URL OPS ENTITIES SEED

The plan is a deterministic function of (OPS, ENTITIES, SEED). After each enqueue returns,
its index is appended to LOG, so the test knows what the queue promised to keep. On a
restart the client resumes after the last logged index; the one enqueue that may have
committed without being logged (killed in between) is found in the queue by its payload,
so the user's edit is neither lost nor made twice.
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any

from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions


def plan(ops: int, entities: int, seed: int) -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(seed)
    created: set[int] = set()
    deleted: set[int] = set()
    steps: list[tuple[str, str, dict[str, Any]]] = []
    for n in range(ops):
        e = rng.randrange(entities)
        entity = f"note:c{e}"
        body = {"id": f"c{e}", "title": f"t{e}", "body": f"edit {n}", "n": n}
        if e not in created:
            created.add(e)
            steps.append(("create", entity, body))
        elif e in deleted or n < ops * 0.9 or rng.random() > 0.05:
            if e in deleted:  # deleted notes stay deleted: edit another note instead
                alive = sorted(created - deleted)
                e = alive[n % len(alive)]
                entity = f"note:c{e}"
                body = {"id": f"c{e}", "title": f"t{e}", "body": f"edit {n}", "n": n}
            steps.append(("update", entity, body))
        else:
            deleted.add(e)
            steps.append(("delete", entity, {"n": n}))
    return steps


def main() -> None:
    edge_db, log_path, proxy_url = sys.argv[1:4]
    ops, entities, seed = (int(x) for x in sys.argv[4:7])
    mode = sys.argv[7] if len(sys.argv) > 7 else "batches"
    steps = plan(ops, entities, seed)
    # coalesce=False: every one of the plan's operations travels through the faulty network
    # on its own (coalescing has its own law-of-equivalence tests).
    queue = OfflineQueue(
        edge_db,
        QueueOptions(
            retry_policy=RetryPolicy(base=0.02, cap=0.3, max_attempts=10_000), coalesce=False
        ),
    )
    logged: list[int] = []
    if os.path.exists(log_path):
        with open(log_path) as f:
            logged = [int(line) for line in f if line.strip().isdigit()]
    start = (max(logged) + 1) if logged else 0
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    if start < len(steps):
        # Did the enqueue of `start` commit before we were killed?
        seen = {op.payload.get("n") for op in queue.operations(limit=10**7) if op.payload}
        if start in seen:
            log.write(f"{start}\n")
            start += 1
    if mode == "concurrent":
        # Single requests, four on the wire (the server groups them into shared commits),
        # and two engine batches on the way at once.
        transport = HttpTransport(proxy_url, timeout=3.0, concurrency=4)
        engine = SyncEngine(
            queue,
            transport,
            SyncOptions(cycle_size=20, pipeline=2),
            connectivity=ManualMonitor(True),
        )
    else:
        transport = HttpTransport(proxy_url, batch=10, timeout=3.0)
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor(True))
    engine.start()
    for n in range(start, len(steps)):
        kind, entity, payload = steps[n]
        engine.enqueue(kind, entity, payload)
        log.write(f"{n}\n")
        if n % 50 == 0:
            time.sleep(0.01)  # let the engine get some batches out between enqueues
    while queue.stats().depth:
        time.sleep(0.05)
    log.write("drained\n")
    engine.stop()
    queue.close()


if __name__ == "__main__":
    main()
