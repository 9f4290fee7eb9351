"""Opening a SQLite store: what counts as someone else's file, several processes creating
one file at once, and connections of threads that have ended."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from pigeon.exceptions import ForeignDatabase
from pigeon.storage.server import open_server_db


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _made_by_another_app(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "statements",
    [
        ["CREATE VIEW v AS SELECT 1 AS one"],  # a schema object, but not a table
        ["PRAGMA user_version = 1"],  # a version number and nothing else
        ["PRAGMA user_version = 4"],  # ... even one that equals our latest
    ],
    ids=["view-only", "user-version", "user-version-latest"],
)
def test_a_file_with_anything_in_it_but_our_id_is_foreign_and_untouched(
    tmp_path: Path, statements: list[str]
) -> None:
    path = tmp_path / "other.db"
    _made_by_another_app(path, *statements)
    before = _digest(path)
    with pytest.raises(ForeignDatabase, match="not a pigeon server database"):
        open_server_db(path)
    assert _digest(path) == before
    assert not (tmp_path / "other.db-wal").exists()


def test_a_refused_file_keeps_no_descriptor_open(tmp_path: Path) -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counts descriptors through /proc")
    path = tmp_path / "other.db"
    _made_by_another_app(path, "CREATE TABLE theirs (x)")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(ForeignDatabase):
            open_server_db(path)
    assert len(os.listdir("/proc/self/fd")) <= before + 1


def _open(path: str, ready: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    ready.wait()
    try:
        open_server_db(path).close()
        out.put("ok")
    except Exception as exc:  # reported, not raised: the parent counts them
        out.put(f"{type(exc).__name__}: {exc}")


def test_processes_creating_one_file_at_once_all_open_it(tmp_path: Path) -> None:
    # Each sees either a new file (and creates it, or waits for whoever does) or the
    # finished one: never a half-made file taken for someone else's, never "locked".
    context = multiprocessing.get_context("fork")
    for trial in range(4):
        path = str(tmp_path / f"shared-{trial}.db")
        ready, out = context.Event(), context.Queue()
        # daemonic: multiprocessing's exit handler terminates any left by an interrupt
        procs = [
            context.Process(target=_open, args=(path, ready, out), daemon=True) for _ in range(5)
        ]
        for proc in procs:
            proc.start()
        ready.set()
        outcomes = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(60)
        assert outcomes == ["ok"] * len(procs), outcomes


def test_connections_of_ended_threads_are_closed(tmp_path: Path) -> None:
    db = open_server_db(tmp_path / "s.db", durability="normal")

    def work() -> None:
        with db.transaction() as tx:
            tx.fetchone("health_probe")

    try:
        for _ in range(50):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
        # This thread's and at most the last ended one's: each new connection closes
        # those of threads that have ended, as a thread pool's workers come and go.
        assert len(db._all) <= 2
    finally:
        db.close()
