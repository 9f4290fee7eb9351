"""A client process of the multi-node test: several offline queues, each in its own thread.

Usage: python multinode_client.py EDGE_DIR PROXY_URLS FIRST COUNT OPS SEED

Queue ``q`` (FIRST <= q < FIRST+COUNT) lives in EDGE_DIR/q{q}.db, sends through proxy
``PROXY_URLS[q % n]`` (comma-separated) and enqueues ``plan(q, OPS, SEED)``: notes created
then replaced, and answers whose grading (and sometimes notification) are jobs. Coalescing
is off, so every enqueued operation is sent. Exits 0 once every queue is drained.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions

ENTITIES = 12  # notes per queue
Step = tuple[str, str, dict[str, Any], str | None, str | None]  # type, entity, body, path, method


def plan(q: int, ops: int, seed: int) -> list[Step]:
    rng = random.Random(seed * 1000 + q)
    created: set[int] = set()
    steps: list[Step] = []
    for n in range(ops):
        if rng.random() < 0.2:
            label = f"q{q}-a{n}"
            body: dict[str, Any] = {"question": label, "answer": "42", "expected": "42"}
            if n % 7 == 0:
                body["notify"] = f"teacher-{q}"
            if n % 50 == 3:
                body["answer"] = "refuse me"  # see tests/multinode_app.py: REFUSED
            steps.append(("create", f"answer:{label}", body, "/answers", "POST"))
            continue
        e = rng.randrange(ENTITIES)
        note = f"q{q}e{e}"
        body = {"id": note, "title": f"t{e}", "body": f"edit {n}", "n": n}
        if e in created:
            steps.append(("update", f"note:{note}", body, None, None))
        else:
            created.add(e)
            steps.append(("create", f"note:{note}", body, None, None))
    return steps


def run_queue(edge_dir: Path, proxy: str, q: int, ops: int, seed: int) -> None:
    queue = OfflineQueue(
        edge_dir / f"q{q}.db",
        QueueOptions(
            retry_policy=RetryPolicy(base=0.05, cap=0.5, max_attempts=10_000),
            durability="normal",
            coalesce=False,
        ),
    )
    transport = HttpTransport(proxy, batch=20, timeout=5.0)
    engine = SyncEngine(
        queue, transport, SyncOptions(cycle_size=20), connectivity=ManualMonitor(True)
    )
    engine.start()
    try:
        for n, (kind, entity, body, path, method) in enumerate(plan(q, ops, seed)):
            engine.enqueue(kind, entity, body, endpoint=path, method=method)
            if n % 25 == 0:
                time.sleep(0.02)  # a user's pace, roughly: the queue fills while it sends
        while queue.stats().depth:
            time.sleep(0.1)
    finally:
        engine.stop()
        queue.close()


def main() -> None:
    edge_dir, proxies = Path(sys.argv[1]), sys.argv[2].split(",")
    first, count, ops, seed = (int(x) for x in sys.argv[3:7])
    failures: list[BaseException] = []

    def one(q: int) -> None:
        try:
            run_queue(edge_dir, proxies[q % len(proxies)], q, ops, seed)
        except BaseException as exc:
            failures.append(exc)
            raise

    threads = [threading.Thread(target=one, args=(q,)) for q in range(first, first + count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
