"""The server databases the tests open, one fixture per meaning (tests/conftest.py loads
this as a plugin, so every directory shares them):

- ``server_db_url``: the URL of a fresh server database, on each backend in turn;
- ``db``: that database opened (``open_server_db``), closed after the test;
- ``pg``: a server database on PostgreSQL alone, for what only that backend does;
- ``sqlite_db``: one on SQLite alone, for the tests of the unit tier that need a real one.

They open with durability "normal": no test here survives a power cut, and an fsync per
commit only makes the suite slower. A test that needs other options opens its own under a
name that says how (``sealed_db``, ``notes_db``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

BACKENDS = ["sqlite", "postgres"]


def lock_waiters(pg_url: str) -> int:
    """Backends of the database at ``pg_url`` waiting for a lock right now."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@contextlib.contextmanager
def tables_locked(url: str, *tables: str) -> Iterator[None]:
    """Another connection holding what a write of ``tables`` needs (on SQLite, the
    file's write lock), until the block ends."""
    if not url.startswith("postgres"):
        other = sqlite3.connect(url, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            yield
        finally:
            other.close()
        return
    with psycopg.connect(url) as conn:
        conn.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
        yield


def claim_held(url: str, key: str) -> bool:
    """Whether a request holds idempotency key ``key`` in the server database at ``url``,
    as another process sees it: its claim committed, or (an inline claim, not yet
    committed) a transaction under way: on PostgreSQL a lock taken on the claims table,
    on SQLite the file's write lock."""
    if url.startswith("postgres"):
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pigeon_idempotency_claims WHERE idem_key = %s)"
                " OR EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " WHERE c.relname = 'pigeon_idempotency_claims' AND l.mode = 'RowExclusiveLock'"
                " AND l.pid <> pg_backend_pid() AND l.database = (SELECT oid FROM pg_database"
                " WHERE datname = current_database()))",
                (key,),
            ).fetchone()
        return bool(row and row[0])
    conn = sqlite3.connect(url, isolation_level=None, timeout=0)
    try:
        sql = "SELECT 1 FROM pigeon_idempotency_claims WHERE idem_key = ?"
        if conn.execute(sql, (key,)).fetchone():
            return True
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # locked: a write transaction is under way
            return True
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


def opened(url: str | Path) -> Iterator[Database]:
    """A fixture's body: the server database at ``url``, closed when the test is done."""
    database = open_server_db(url, durability="normal")
    try:
        yield database
    finally:
        database.close()


@pytest.fixture(params=BACKENDS)
def server_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh server database's URL: a SQLite file, then a PostgreSQL database."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return str(tmp_path / "server.db")


@pytest.fixture
def db(server_db_url: str) -> Iterator[Database]:
    yield from opened(server_db_url)


@pytest.fixture
def pg(pg_url: str) -> Iterator[Database]:
    yield from opened(pg_url)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    yield from opened(tmp_path / "server.db")
