"""Edge queue benchmarks, each against a baseline measured in the same run.

* enqueue, 1 thread, durability full  vs  raw sqlite3 INSERT+COMMIT per operation (WAL,
  synchronous=FULL) and persist-queue's ``SQLiteAckQueue.put``;
* enqueue, 8 threads (group commit)  vs  the raw one-thread per-operation rate;
* delivery cycle, ``next_batch(100)`` + ``mark_delivered`` per operation inside
  ``queue.batch()`` (one fsync per batch, as the sync engine does)  vs  persist-queue's
  ``get`` + ``ack`` per item;
* depth: enqueue and ``next_batch(100)`` at 1,000,000 pending vs at 1,000 (durability
  "normal" so fsync noise does not hide index costs). The deep file is built by bulk
  inserts through the store's own ``bulk_insert_op`` query in transactions of 50,000
  rows (distinct entities, each its own head), which is what 1,000,000 enqueues leave.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench._report import Row, rate, row
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.store import EdgeStore

PAYLOAD = {"title": "shopping list", "body": "milk, eggs, bread, coffee " * 6, "pinned": False}


def _raw_per_op(path: Path, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE ops (id TEXT PRIMARY KEY, key TEXT, entity TEXT, payload TEXT)")
    import json

    text = json.dumps(PAYLOAD)
    started = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO ops VALUES (?, ?, ?, ?)",
            (str(uuid.uuid4()), str(uuid.uuid4()), f"note:{i}", text),
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return rate(n, elapsed)


def _persist_put(path: Path, n: int) -> float:
    import persistqueue

    queue = persistqueue.SQLiteAckQueue(str(path), auto_commit=True)
    started = time.perf_counter()
    for i in range(n):
        queue.put({"entity": f"note:{i}", **PAYLOAD})
    return rate(n, time.perf_counter() - started)


def _persist_cycle(path: Path, n: int) -> float:
    import persistqueue

    queue = persistqueue.SQLiteAckQueue(str(path), auto_commit=True)
    for i in range(n):
        queue.put({"entity": f"note:{i}", **PAYLOAD})
    started = time.perf_counter()
    for _ in range(n):
        item = queue.get(block=False)
        queue.ack(item)
    return rate(n, time.perf_counter() - started)


def _enqueue_one_thread(path: Path, n: int) -> float:
    with OfflineQueue(path, durability="full") as queue:
        started = time.perf_counter()
        for i in range(n):
            queue.enqueue("update", f"note:{i}", PAYLOAD)
        return rate(n, time.perf_counter() - started)


def _enqueue_threads(path: Path, n: int, threads: int) -> tuple[float, float]:
    with OfflineQueue(path, durability="full") as queue:
        per = n // threads
        gate = threading.Barrier(threads + 1)

        def work(t: int) -> None:
            gate.wait()
            for i in range(per):
                queue.enqueue("update", f"note:{t}:{i}", PAYLOAD)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        gate.wait()
        started = time.perf_counter()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - started
        return rate(per * threads, elapsed), per * threads / max(queue.commits, 1)


def bulk_fill(path: Path, n: int, *, chunk: int = 50_000) -> None:
    """Fill a queue file with ``n`` pending operations on distinct entities, fast."""
    import json

    OfflineQueue(path, durability="normal").close()
    store = EdgeStore(path, durability="normal", create=False, recover=False, now=time.time())
    text = json.dumps(PAYLOAD)
    now = time.time()
    base = uuid.uuid4().hex[:8]
    try:
        for start in range(0, n, chunk):
            rows = [
                {
                    "id": f"{base}-{i:012d}",
                    "idempotency_key": f"k-{base}-{i:012d}",
                    "type": "update",
                    "entity": f"note:{i:09d}",
                    "endpoint": f"/notes/{i}",
                    "method": "PUT",
                    "payload": text,
                    "created_at": now,
                    "clock": f"{int(now * 1000):015d}-{i:010d}-bench",
                }
                for i in range(start, min(start + chunk, n))
            ]
            with store.write() as tx:
                tx.executemany("bulk_insert_op", rows)
    finally:
        store.close()


def _delivery_cycle(path: Path, n: int) -> float:
    bulk_fill(path, n)
    with OfflineQueue(path, durability="full") as queue:
        done = 0
        started = time.perf_counter()
        while True:
            batch = queue.next_batch(100)
            if not batch:
                break
            with queue.batch():
                for op in batch:
                    queue.mark_delivered(op.id)
            done += len(batch)
        elapsed = time.perf_counter() - started
        assert done == n, (done, n)
        return rate(n, elapsed)


def _depth_costs(path: Path, depth: int, samples: int) -> tuple[float, float]:
    """Median seconds per enqueue and per next_batch(100) on a queue ``depth`` deep."""
    bulk_fill(path, depth)
    with OfflineQueue(path, durability="normal") as queue:
        enq, nb = [], []
        for i in range(samples):
            t0 = time.perf_counter()
            queue.enqueue("update", f"fresh:{i}", PAYLOAD)
            enq.append(time.perf_counter() - t0)
        for _ in range(samples // 10):
            t0 = time.perf_counter()
            batch = queue.next_batch(100)
            nb.append(time.perf_counter() - t0)
            with queue.batch():
                for op in batch:
                    queue.release(op.id)
        enq.sort()
        nb.sort()
        return enq[len(enq) // 2], nb[len(nb) // 2]


def run(*, quick: bool = False) -> list[Row]:
    n_single = 1000 if quick else 3000
    n_threads = 4000 if quick else 16000
    n_cycle = 20_000 if quick else 100_000
    n_pq_cycle = 1000 if quick else 4000
    deep = 200_000 if quick else 1_000_000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="pigeon-bench-") as tmp:
        d = Path(tmp)
        # Interleaved rounds, median rate: the load of a shared machine drifts, and a
        # baseline measured a minute apart from pigeon would compare two machines.
        raws, puts, ones = [], [], []
        for r in range(5):
            raws.append(_raw_per_op(d / f"raw{r}.db", n_single // 5))
            puts.append(_persist_put(d / f"pq-put{r}", n_single // 5))
            ones.append(_enqueue_one_thread(d / f"one{r}.db", n_single // 5))
        raw, pq_put, one = (sorted(x)[2] for x in (raws, puts, ones))
        rows.append(
            row("enqueue, 1 thread, full", one, raw, unit="ops/s", baseline_name="raw sqlite3",
                target=">= 0.9x", ok=one >= 0.9 * raw)
        )  # fmt: skip
        rows.append(
            row("enqueue, 1 thread, full", one, pq_put, unit="ops/s",
                baseline_name="persist-queue put", target="-", ok=True)
        )  # fmt: skip
        eight, per_commit = _enqueue_threads(d / "eight.db", n_threads, 8)
        rows.append(
            row(f"enqueue, 8 threads, full ({per_commit:.1f} ops/commit)", eight, raw,
                unit="ops/s", baseline_name="raw sqlite3, 1 thread", target=">= 4x",
                ok=eight >= 4 * raw)
        )  # fmt: skip
        cycle = _delivery_cycle(d / "cycle.db", n_cycle)
        pq_cycle = _persist_cycle(d / "pq-cycle", n_pq_cycle)
        rows.append(
            row(f"delivery cycle over {n_cycle:,}", cycle, pq_cycle, unit="ops/s",
                baseline_name="persist-queue get+ack", target=">= 10x",
                ok=cycle >= 10 * pq_cycle)
        )  # fmt: skip
        shallow_enq, shallow_nb = _depth_costs(d / "shallow.db", 1000, 400)
        for name in ("shallow.db", "cycle.db", "eight.db"):
            for suffix in ("", "-wal", "-shm", "-lock"):
                with_suffix = d / (name + suffix)
                if with_suffix.exists():
                    os.remove(with_suffix)
        deep_enq, deep_nb = _depth_costs(d / "deep.db", deep, 400)
        for label, at_deep, at_shallow in (
            ("enqueue", deep_enq, shallow_enq),
            ("next_batch(100)", deep_nb, shallow_nb),
        ):
            rows.append(
                row(f"{label} at depth {deep:,} vs 1,000", at_deep * 1e6, at_shallow * 1e6,
                    unit="µs", baseline_name="same at depth 1,000", target="cost <= 1.5x",
                    ok=at_deep <= 1.5 * at_shallow, higher_is_better=False)
            )  # fmt: skip
    return rows
