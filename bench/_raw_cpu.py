"""CPU an operation of the set-based intake's raw SQL on each backend, in one thread.

The same batches of creates as the ceiling row's (bench/_raw_sets.py), with no HTTP and
no other work on the clock: SQLite's cost is its calling thread's CPU (SQLite runs in it),
PostgreSQL's is the calling thread's (psycopg) plus its backend process's, read from the
kernel's account of that process. Where every process of a row shares the CPUs and all
are busy, the backend that asks more CPU of an operation serves fewer; this row says by
how much, without the noise of a dozen processes taking turns on two cores.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench._raw_batch import Entries, creates
from bench._raw_sets import migrated, postgres_batch, sqlite_batch
from bench._servers import pg_database

WARM = 20  # batches before the clock: connections, prepared statements, caches
ROUNDS = 2  # each backend measured this often, in turns; the least CPU kept


@contextlib.contextmanager
def _sqlite(path: str) -> Iterator[tuple[Callable[[Entries], Any], Callable[[], float]]]:
    """Each batch in a write transaction of its own, synchronous=FULL as pigeon's."""
    migrated(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")

    def write(entries: Entries) -> None:
        conn.execute("BEGIN IMMEDIATE")
        sqlite_batch(conn, entries, time.time())
        conn.execute("COMMIT")

    with contextlib.closing(conn):
        yield write, time.thread_time


@contextlib.contextmanager
def _postgres(url: str) -> Iterator[tuple[Callable[[Entries], Any], Callable[[], float]]]:
    migrated(url)
    with psycopg.connect(url) as conn:
        backend = psutil.Process(conn.info.backend_pid)

        def spent() -> float:
            times = backend.cpu_times()
            return time.thread_time() + float(times.user + times.system)

        yield (lambda entries: postgres_batch(conn, entries)), spent


def _cpu_per_op(
    side: contextlib.AbstractContextManager[tuple[Callable[[Entries], Any], Callable[[], float]]],
    planned: list[Entries],
) -> float:
    with side as (write, spent):
        for entries in planned[:WARM]:
            write(entries)
        started = spent()
        for entries in planned[WARM:]:
            write(entries)
        ops = sum(len(entries) for entries in planned[WARM:])
        return (spent() - started) / ops * 1e6


def measure(count: int, size: int) -> tuple[float, float]:
    """µs of CPU an operation, (SQLite, PostgreSQL), over ``count`` batches of ``size``."""
    lite, pg = [], []
    with tempfile.TemporaryDirectory(prefix="pigeon-cpu-") as tmp:
        for r in range(ROUNDS):
            planned = creates(WARM + count, size, f"cpu{r}")
            with pg_database() as url:
                pg.append(_cpu_per_op(_postgres(url), planned))
            lite.append(_cpu_per_op(_sqlite(str(Path(tmp) / f"cpu{r}.db")), planned))
    return min(lite), min(pg)
