"""What the edge benchmarks, their ceilings and the machine's condition share: the
payload, the raw baseline (its table and its one INSERT per commit), and a harness of
writer threads that start and stop together."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path

PAYLOAD = {"title": "shopping list", "body": "milk, eggs, bread, coffee " * 6, "pinned": False}


def raw_table(path: Path) -> sqlite3.Connection:
    """The raw baseline's file: WAL, synchronous=FULL, one 4-column table, no pigeon."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE ops (id TEXT PRIMARY KEY, key TEXT, entity TEXT, payload TEXT)")
    return conn


class RawInserts:
    """sqlite3 INSERT + COMMIT per operation, WAL, synchronous=FULL: the edge's floor."""

    def __init__(self, path: Path) -> None:
        self.conn = raw_table(path)
        self.text = json.dumps(PAYLOAD)
        self.i = 0

    def step(self, k: int) -> float:
        started = time.perf_counter()
        for _ in range(k):
            self.i += 1
            self.conn.execute("BEGIN")
            self.conn.execute(
                "INSERT INTO ops VALUES (?, ?, ?, ?)",
                (str(uuid.uuid4()), str(uuid.uuid4()), f"note:{self.i}", self.text),
            )
            self.conn.execute("COMMIT")
        return time.perf_counter() - started

    def close(self) -> None:
        self.conn.close()


class Writers:
    """``threads`` threads calling ``write(t, i)`` together; each ``step(k)`` runs ``k``
    writes across them and returns the seconds from the first to the last."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.per = 0
        self.start = threading.Barrier(threads + 1)
        self.end = threading.Barrier(threads + 1)
        self.stop = False
        self.workers = [
            threading.Thread(target=self._work, args=(t,), daemon=True) for t in range(threads)
        ]

    def begin(self) -> None:
        """Start the threads (after the subclass has set up what ``write`` uses)."""
        for w in self.workers:
            w.start()

    def write(self, t: int, i: int) -> None:
        raise NotImplementedError

    def _work(self, t: int) -> None:
        i = 0
        while True:
            self.start.wait()
            if self.stop:
                return
            for _ in range(self.per):
                i += 1
                self.write(t, i)
            self.end.wait()

    def step(self, k: int) -> float:
        self.per = k // self.threads
        self.start.wait()
        started = time.perf_counter()
        self.end.wait()
        return time.perf_counter() - started

    def close(self) -> None:
        self.stop = True
        self.start.wait()
        for w in self.workers:
            w.join()
