"""SQLiteTx savepoints: nested ones roll back alone, and a transaction with thousands of
them (a batch: one per operation) still runs a handful of distinct SQL texts, so the
named queries stay in sqlite3's statement cache."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.storage.queries import load_queries
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase, SQLiteTx, connect

QUERIES = {"put": "INSERT INTO t (v) VALUES (:v)"}


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = connect(tmp_path / "t.db", "normal")
    conn.execute("CREATE TABLE t (v TEXT)")
    yield conn
    conn.close()


def _values(conn: sqlite3.Connection) -> list[str]:
    return [row["v"] for row in conn.execute("SELECT v FROM t ORDER BY rowid")]


def test_an_inner_savepoint_rolls_back_alone(conn: sqlite3.Connection) -> None:
    tx = SQLiteTx(conn, QUERIES)
    conn.execute("BEGIN IMMEDIATE")
    with tx.savepoint():
        tx.execute("put", {"v": "outer"})
        with pytest.raises(ZeroDivisionError), tx.savepoint():
            tx.execute("put", {"v": "inner"})
            1 / 0  # noqa: B018
        with tx.savepoint():
            tx.execute("put", {"v": "inner kept"})
    with pytest.raises(KeyError), tx.savepoint():
        tx.execute("put", {"v": "sibling"})
        raise KeyError("undo")
    conn.execute("COMMIT")
    assert _values(conn) == ["outer", "inner kept"]


def test_two_tx_objects_on_one_connection_nest(conn: sqlite3.Connection) -> None:
    # The edge queue opens a savepoint of a thread's batch() through a second SQLiteTx on
    # the same connection: both count depth from 1, so the names repeat. SQLite resolves
    # a repeated name to the innermost savepoint, which is the one being closed.
    outer, inner = SQLiteTx(conn, QUERIES), SQLiteTx(conn, QUERIES)
    conn.execute("BEGIN IMMEDIATE")
    with outer.savepoint():
        outer.execute("put", {"v": "a"})
        with pytest.raises(RuntimeError), inner.savepoint():
            inner.execute("put", {"v": "b"})
            raise RuntimeError
        inner.execute("put", {"v": "c"})
    conn.execute("COMMIT")
    assert _values(conn) == ["a", "c"]


def test_many_savepoints_use_few_statement_texts(conn: sqlite3.Connection) -> None:
    seen: set[str] = set()
    conn.set_trace_callback(seen.add)
    tx = SQLiteTx(conn, QUERIES)
    conn.execute("BEGIN IMMEDIATE")
    for i in range(300):
        try:
            with tx.savepoint():
                tx.execute("put", {"v": str(i)})
                with tx.savepoint():
                    if i % 3 == 0:
                        raise ValueError(i)
        except ValueError:
            pass
    conn.execute("COMMIT")
    conn.set_trace_callback(None)
    savepoint_texts = {s for s in seen if s.split()[0] in ("SAVEPOINT", "RELEASE", "ROLLBACK")}
    assert savepoint_texts == {
        "SAVEPOINT sp_1",
        "SAVEPOINT sp_2",
        "RELEASE sp_1",
        "RELEASE sp_2",
        "ROLLBACK TO sp_1",
        "ROLLBACK TO sp_2",
    }
    assert len(_values(conn)) == 200  # each third rolled back with its outer savepoint


def _temp_store(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA temp_store").fetchone()["temp_store"])


def _in_another_thread(db: SQLiteDatabase) -> int:
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(_temp_store(db.connection())))
    thread.start()
    thread.join()
    return seen[0]


def test_every_connection_journals_its_savepoints_in_memory(tmp_path: Path) -> None:
    # A set-based batch's savepoint journalled to a temporary file cost ~9 us an operation.
    server = open_server_db(tmp_path / "server.db")
    edge_like = SQLiteDatabase(  # an edge queue's file: other settings of its own
        tmp_path / "edge.db",
        application_id=0x50474E45,
        components=("edge",),
        queries=load_queries("sqlite", "edge"),
        pragmas={"cache_size": -16384},
    )
    try:
        for db in (server, edge_like):
            assert _temp_store(db.connection()) == 2  # MEMORY
            assert _in_another_thread(db) == 2  # each thread's connection alike
    finally:
        edge_like.close()
        server.close()
