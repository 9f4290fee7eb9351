"""SQLiteDatabase hands the write lock from thread to thread without the busy handler."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase


def _handover_latency(path: Path, hold: float) -> float:
    """Seconds between one thread's COMMIT and a waiting thread's BEGIN IMMEDIATE."""
    db = open_server_db(path, durability="normal")
    inside = threading.Event()
    committed_at: list[float] = []
    began_at: list[float] = []

    def holder() -> None:
        with db.transaction():
            inside.set()
            time.sleep(hold)
        committed_at.append(time.perf_counter())

    def waiter() -> None:
        inside.wait()
        with db.transaction():
            began_at.append(time.perf_counter())

    threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        db.close()
    return began_at[0] - committed_at[0]


def test_a_waiting_writer_starts_as_soon_as_the_other_commits(tmp_path: Path) -> None:
    # SQLite's busy handler would have the waiter asleep in steps of up to 100 ms: after a
    # 0.45 s hold its next look is at about 0.53 s, some 80 ms after the commit.
    latencies = [_handover_latency(tmp_path / f"{i}.db", 0.45) for i in range(3)]
    assert min(latencies) < 0.04, latencies


def test_a_nested_write_transaction_is_refused_not_deadlocked(tmp_path: Path) -> None:
    db = open_server_db(tmp_path / "s.db", durability="normal")
    try:
        with (
            db.transaction(),
            pytest.raises(Exception, match="within a transaction"),
            db.transaction(),
        ):
            pass
    finally:
        db.close()


@pytest.mark.parametrize("form", ["transaction", "run_in_transaction"])
def test_a_commit_that_fails_is_rolled_back_and_the_next_transaction_runs(
    tmp_path: Path, form: str
) -> None:
    import sqlite3

    db = open_server_db(tmp_path / "s.db", durability="normal")
    assert isinstance(db, SQLiteDatabase)
    try:
        conn = db.connection()
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE child (parent INTEGER REFERENCES parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
        orphan = "INSERT INTO child VALUES (42)"  # refused only at COMMIT
        with pytest.raises(sqlite3.IntegrityError):
            if form == "transaction":
                with db.transaction():
                    conn.execute(orphan)
            else:
                db.run_in_transaction(lambda tx: conn.execute(orphan))
        assert not conn.in_transaction
        with db.transaction():
            conn.execute("INSERT INTO parent VALUES (1)")
        assert db.run_in_transaction(lambda tx: 7) == 7
        assert conn.execute("SELECT count(*) AS n FROM child").fetchone()["n"] == 0
        assert conn.execute("SELECT count(*) AS n FROM parent").fetchone()["n"] == 1
    finally:
        db.close()
