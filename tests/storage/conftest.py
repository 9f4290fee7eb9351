"""A PostgreSQL database shared by one module's tests (the fill is the expensive part), a
server's SQLite file, and the page size of a SQLite file as the file itself says it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase
from tests.conftest import DATABASES, require_postgres


@pytest.fixture(scope="module")
def pg_url_module() -> Iterator[str]:
    require_postgres()
    url = DATABASES.create("pigeon_m_")
    yield url
    DATABASES.release(url)


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    """A server's database in a SQLite file of its own, closed after the test."""
    db = open_server_db(tmp_path / "server.db")
    assert isinstance(db, SQLiteDatabase)
    yield db
    db.close()


def page_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
