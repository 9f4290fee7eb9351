"""Ceilings for the edge benchmarks: contenders that are not pigeon features but say, in
the same interleaved run, how far a pigeon row could go at best.

* ``EnqueueSQL``: the statements one enqueue of a fresh entity runs (the store's
  ``get_clock``, ``queued_tail``, ``insert_op`` and ``bump_state`` between BEGIN IMMEDIATE
  and COMMIT) on a file made by ``OfflineQueue``, with no Python around them.
  ``enqueue, 1 thread`` can be no faster: what this row lacks of 1.0x is the schema's
  indexes, the rest is the Python around it.
* ``EnqueueLeast``: the same SQL plus the least Python any enqueue needs (encode the
  payload, two UUIDs, a clock stamp, the returned ``Operation``). No validation, locking
  or coalescing; what it lacks of 0.9x no amount of trimming our enqueue can win back.
* ``EnqueueGrouped``: 8 enqueues per commit from one thread (``queue.batch()``): group
  commit with a full group and no hand-off between threads. Eight threads share one
  interpreter lock and do the same work plus the hand-offs.
* ``BareThreads``: no pigeon at all. Eight threads each wait for their own durable row,
  as ``enqueue`` must; a writer thread (the textbook group commit) takes whatever is
  queued, writes it with one ``executemany`` of the raw baseline's 4-column INSERT and
  commits. What eight Python threads can reach here with the least possible work per
  row: the hand-offs alone (wake the writer, wake each waiter, pass the interpreter lock)
  bound it, whatever the queue does.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from bench._writers import PAYLOAD, Writers, raw_table
from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.storage.queries import load_queries


class EnqueueSQL:
    """The SQL of one enqueue of a fresh entity, by hand, with the store's own queries."""

    def __init__(self, path: Path) -> None:
        # The real schema, pragmas, page size.
        OfflineQueue(path, QueueOptions(durability="full")).close()
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA synchronous = FULL")
        queries = load_queries("sqlite", "edge")
        self.tail, self.insert = queries["queued_tail"], queries["insert_op"]
        self.floor, self.bump = queries["get_clock"], queries["bump_state"]
        self.text = json.dumps(PAYLOAD, separators=(",", ":"))
        self.i = 0

    def step(self, k: int) -> float:
        started = time.perf_counter()
        for _ in range(k):
            self.i += 1
            self._write(self.i, self.text, str(uuid.uuid4()), str(uuid.uuid4()), time.time())
        return time.perf_counter() - started

    def _write(self, i: int, text: str, op_id: str, key: str, now: float) -> tuple[int, str]:
        clock = f"{int(now * 1000):015d}-{i:010d}-bench"
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(self.floor).fetchone()
        self.conn.execute(self.tail, {"entity": f"note:{i}"}).fetchone()
        seq = self.conn.execute(
            self.insert,
            {
                "id": op_id,
                "idempotency_key": key,
                "type": "update",
                "entity": f"note:{i}",
                "endpoint": f"/notes/{i}",
                "method": "PUT",
                "payload": text,
                "created_at": now,
                "clock": clock,
                "base_version": None,
                "head": 1,
            },
        ).lastrowid
        self.conn.execute(self.bump, {"clock": clock, "coalesced": 0})
        self.conn.execute("COMMIT")
        return seq or 0, clock

    def close(self) -> None:
        self.conn.close()


class EnqueueLeast(EnqueueSQL):
    """``EnqueueSQL`` plus the least Python an enqueue needs around it."""

    def step(self, k: int) -> float:
        started = time.perf_counter()
        for _ in range(k):
            self.i += 1
            text = json.dumps(PAYLOAD, separators=(",", ":"))
            op_id, key, now = str(uuid.uuid4()), str(uuid.uuid4()), time.time()
            seq, clock = self._write(self.i, text, op_id, key, now)
            Operation(
                id=op_id,
                type="update",
                entity=f"note:{self.i}",
                payload=json.loads(text),
                idempotency_key=key,
                endpoint=f"/notes/{self.i}",
                method="PUT",
                created_at=now,
                clock=clock,
                next_attempt_at=now,
                status=OpStatus.PENDING,
                seq=seq,
            )
        return time.perf_counter() - started


class EnqueueGrouped:
    """One thread, ``group`` enqueues per ``queue.batch()``: one transaction, one fsync."""

    def __init__(self, path: Path, group: int) -> None:
        self.queue = OfflineQueue(path, QueueOptions(durability="full"))
        self.group = group
        self.i = 0

    def step(self, k: int) -> float:
        started = time.perf_counter()
        for _ in range(k // self.group):
            with self.queue.batch():
                for _ in range(self.group):
                    self.i += 1
                    self.queue.enqueue("update", f"note:{self.i}", PAYLOAD)
        return time.perf_counter() - started

    def close(self) -> None:
        self.queue.close()


class BareThreads(Writers):
    """``threads`` writers, each waiting for its own row's commit by a writer thread."""

    def __init__(self, path: Path, threads: int) -> None:
        super().__init__(threads)
        self.conn = raw_table(path)
        self.text = json.dumps(PAYLOAD)
        self.inbox: queue.SimpleQueue[tuple[tuple[str, ...], threading.Lock] | None] = (
            queue.SimpleQueue()
        )
        self.commits = self.rows = 0
        self.writer = threading.Thread(target=self._commit, daemon=True)
        self.writer.start()
        self.begin()

    def _commit(self) -> None:
        while True:
            first = self.inbox.get()
            if first is None:
                return
            batch = [first]
            while True:
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self.inbox.put(None)  # seen after this batch
                    break
                batch.append(item)
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("INSERT INTO ops VALUES (?, ?, ?, ?)", [r for r, _ in batch])
            self.conn.execute("COMMIT")
            self.commits += 1
            self.rows += len(batch)
            for _, done in batch:
                done.release()

    def write(self, t: int, i: int) -> None:
        done = threading.Lock()
        done.acquire()
        row = (str(uuid.uuid4()), str(uuid.uuid4()), f"note:{t}:{i}", self.text)
        self.inbox.put((row, done))
        done.acquire()  # released by the writer thread once the row is committed

    @property
    def rows_per_commit(self) -> float:
        return self.rows / max(self.commits, 1)

    def close(self) -> None:
        super().close()
        self.inbox.put(None)
        self.writer.join()
        self.conn.close()
