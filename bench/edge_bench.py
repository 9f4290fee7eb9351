"""Edge queue benchmarks, each against a baseline measured in the same run.

* enqueue, 1 thread, durability full  vs  raw sqlite3 INSERT+COMMIT per operation (WAL,
  synchronous=FULL) and persist-queue's ``SQLiteAckQueue.put``;
* enqueue, 8 threads (group commit)  vs  the raw one-thread per-operation rate;
* ceilings, in the same interleaved run, that say how far those two can go (see
  ``bench/_edge_ceilings.py``): enqueue's own SQL with no Python; that SQL plus the least
  Python an enqueue needs; 8 enqueues per commit from one thread; and 8 bare threads with
  no pigeon, each waiting on a writer thread's group commit of a raw 4-column INSERT;
* delivery cycle, ``next_batch(100)`` + ``mark_delivered_many`` of the batch (one
  transaction and one fsync each, as the sync engine settles a reply)  vs
  persist-queue's ``get`` + ``ack`` per item;
* depth: enqueue and ``next_batch(100)`` at 1,000,000 pending vs at 1,000 (durability
  "normal" so fsync noise does not hide index costs), the two depths' samples taken in
  turns. The deep file is built by bulk inserts through the store's own
  ``bulk_insert_op`` query in transactions of 50,000 rows (distinct entities, each its
  own head), which is what 1,000,000 enqueues leave.

Warm-up, alike for pigeon and its baselines: the interleaved contenders each run one
round of steps untimed before the 50 timed ones (``bench._warm.interleaved``: first
statements compiled, lazy imports and caches filled); the delivery cycles, pigeon's and
persist-queue's, each open their file untimed and time from their first read, the
median of three; the depth rows compare pigeon with itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench._edge_ceilings import BareThreads, EnqueueGrouped, EnqueueLeast, EnqueueSQL
from bench._report import Row, rate, row
from bench._warm import interleaved, turn_order
from bench._writers import PAYLOAD, RawInserts, Writers
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite import EdgeStore


class _PersistPut:
    def __init__(self, path: Path) -> None:
        import persistqueue

        self.queue = persistqueue.SQLiteAckQueue(str(path), auto_commit=True)
        self.i = 0

    def step(self, k: int) -> float:
        started = time.perf_counter()
        for _ in range(k):
            self.i += 1
            self.queue.put({"entity": f"note:{self.i}", **PAYLOAD})
        return time.perf_counter() - started

    def close(self) -> None:
        pass


class _EnqueueOne:
    def __init__(self, path: Path) -> None:
        self.queue = OfflineQueue(path, QueueOptions(durability="full"))
        self.i = 0

    def step(self, k: int) -> float:
        started = time.perf_counter()
        for _ in range(k):
            self.i += 1
            self.queue.enqueue("update", f"note:{self.i}", PAYLOAD)
        return time.perf_counter() - started

    def close(self) -> None:
        self.queue.close()


class _EnqueueThreads(Writers):
    """``threads`` writers enqueueing at once; each step runs ``k`` enqueues across them."""

    def __init__(self, path: Path, threads: int) -> None:
        super().__init__(threads)
        self.queue = OfflineQueue(path, QueueOptions(durability="full"))
        self.begin()

    def write(self, t: int, i: int) -> None:
        self.queue.enqueue("update", f"note:{t}:{i}", PAYLOAD)

    @property
    def ops_per_commit(self) -> float:
        return self.queue._group.items / max(self.queue.commits, 1)

    def close(self) -> None:
        super().close()
        self.queue.close()


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


def bulk_fill(path: Path, n: int, *, chunk: int = 50_000) -> None:
    """Fill a queue file with ``n`` pending operations on distinct entities, fast."""
    OfflineQueue(path, QueueOptions(durability="normal")).close()
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
    with OfflineQueue(path, QueueOptions(durability="full")) as queue:
        done = 0
        started = time.perf_counter()
        while True:
            batch = queue.next_batch(100)
            if not batch:
                break
            queue.mark_delivered_many([(op.id, None, None) for op in batch])
            done += len(batch)
        elapsed = time.perf_counter() - started
        assert done == n, (done, n)
        return rate(n, elapsed)


def _depth_costs(depths: Sequence[tuple[Path, int]], samples: int) -> list[tuple[float, float]]:
    """Median seconds per enqueue and per next_batch(100) on each queue of ``depths``
    (its file, how deep it is filled), their samples taken in turns, the order reversed
    every other round: a slow spell of this shared machine falls on every depth alike,
    where measuring one depth after the other once put it on the deep one alone."""
    for path, depth in depths:
        bulk_fill(path, depth)
    with contextlib.ExitStack() as stack:
        queues = [
            stack.enter_context(OfflineQueue(path, QueueOptions(durability="normal")))
            for path, _ in depths
        ]
        enq: list[list[float]] = [[] for _ in queues]
        nb: list[list[float]] = [[] for _ in queues]
        for i in range(samples):
            for k in turn_order(len(queues), i):
                t0 = time.perf_counter()
                queues[k].enqueue("update", f"fresh:{i}", PAYLOAD)
                enq[k].append(time.perf_counter() - t0)
        for i in range(samples // 10):
            for k in turn_order(len(queues), i):
                t0 = time.perf_counter()
                batch = queues[k].next_batch(100)
                nb[k].append(time.perf_counter() - t0)
                with queues[k].batch():
                    for op in batch:
                        queues[k].release(op.id)
        return [(_median(e), _median(b)) for e, b in zip(enq, nb, strict=True)]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _remove(folder: Path, *names: str) -> None:
    """Free the disk space of queue files already measured (the deep file is large)."""
    for name in names:
        for suffix in ("", "-wal", "-shm", "-lock"):
            path = folder / (name + suffix)
            if path.exists():
                os.remove(path)


def run(*, quick: bool = False) -> list[Row]:
    n_single = 1000 if quick else 3000
    n_threads = 4000 if quick else 16000
    n_cycle = 20_000 if quick else 100_000
    n_pq_cycle = 1000 if quick else 4000
    deep = 200_000 if quick else 1_000_000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="pigeon-bench-") as tmp:
        d = Path(tmp)
        # Finely interleaved: every contender runs a small step in turn, 50 times over, so
        # the fsync latency of a shared machine (it follows the other tenants' writes from
        # one second to the next) weighs on each of them alike.
        raw_c, put_c, one_c, sql_c, least_c = (
            RawInserts(d / "raw.db"),
            _PersistPut(d / "pq-put"),
            _EnqueueOne(d / "one.db"),
            EnqueueSQL(d / "sql.db"),
            EnqueueLeast(d / "least.db"),
        )
        eight_c = _EnqueueThreads(d / "eight.db", 8)
        grouped_c = EnqueueGrouped(d / "grouped.db", 8)
        bare_c = BareThreads(d / "bare.db", 8)
        contenders = (raw_c, put_c, one_c, sql_c, least_c, eight_c, grouped_c, bare_c)
        sizes = (n_single // 50,) * 5 + (n_threads // 50,) * 3
        try:
            spent = interleaved(contenders, sizes, 50)
            per_commit, bare_per_commit = eight_c.ops_per_commit, bare_c.rows_per_commit
        finally:
            for contender in contenders:
                contender.close()
        raw, pq_put, one, sql, least, eight, grouped, bare = (
            rate(50 * k, t) for k, t in zip(sizes, spent, strict=True)
        )
        rows.append(
            row("enqueue, 1 thread, full", one, raw, unit="ops/s", baseline_name="raw sqlite3",
                target=">= 0.9x", ok=one >= 0.9 * raw)
        )  # fmt: skip
        rows.append(
            row("enqueue, 1 thread, full", one, pq_put, unit="ops/s",
                baseline_name="persist-queue put", target="-", ok=True)
        )  # fmt: skip
        rows.append(
            row("ceiling: enqueue's own SQL, no Python, 1 thread", sql, raw, unit="ops/s",
                baseline_name="raw sqlite3", target="-", ok=True)
        )  # fmt: skip
        rows.append(
            row("ceiling: enqueue's SQL + least Python, 1 thread", least, raw, unit="ops/s",
                baseline_name="raw sqlite3", target="-", ok=True)
        )  # fmt: skip
        rows.append(
            row(f"enqueue, 8 threads, full ({per_commit:.1f} ops/commit)", eight, raw,
                unit="ops/s", baseline_name="raw sqlite3, 1 thread", target=">= 4x",
                ok=eight >= 4 * raw)
        )  # fmt: skip
        rows.append(
            row("ceiling: 8 enqueues per commit, 1 thread, full", grouped, raw, unit="ops/s",
                baseline_name="raw sqlite3, 1 thread", target="-", ok=True)
        )  # fmt: skip
        rows.append(
            row(f"ceiling: 8 threads, no pigeon, bare INSERT, writer-thread group commit "
                f"({bare_per_commit:.1f} rows/commit)", bare, raw, unit="ops/s",
                baseline_name="raw sqlite3, 1 thread", target="-", ok=True)
        )  # fmt: skip
        cycles, pq_cycles = [], []
        for r in range(3):
            cycles.append(_delivery_cycle(d / f"cycle{r}.db", n_cycle))
            pq_cycles.append(_persist_cycle(d / f"pq-cycle{r}", n_pq_cycle))
            _remove(d, f"cycle{r}.db")
        cycle, pq_cycle = _median(cycles), _median(pq_cycles)
        rows.append(
            row(f"delivery cycle over {n_cycle:,}", cycle, pq_cycle, unit="ops/s",
                baseline_name="persist-queue get+ack", target=">= 10x",
                ok=cycle >= 10 * pq_cycle)
        )  # fmt: skip
        _remove(d, "eight.db")
        (shallow_enq, shallow_nb), (deep_enq, deep_nb) = _depth_costs(
            [(d / "shallow.db", 1000), (d / "deep.db", deep)], 400
        )
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
