"""A PostgreSQL database shared by one module's tests (the fill is the expensive part), and
the page size of a SQLite file as the file itself says it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATABASES, require_postgres


@pytest.fixture(scope="module")
def pg_url_module() -> Iterator[str]:
    require_postgres()
    url = DATABASES.create("pigeon_m_")
    yield url
    DATABASES.release(url)


def page_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
