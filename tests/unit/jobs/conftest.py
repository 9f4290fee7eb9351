"""The unit tier's stores: ``any_store`` is the in-memory jobs store and, for the same
test, the SQLite and PostgreSQL ones, so the memory store cannot drift from them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.jobs.stores import BuiltinStore, store_for
from pigeon.jobs.stores.memory import MemoryJobStore
from pigeon.storage.server import open_server_db

STORES = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORES)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BuiltinStore]:
    """A jobs store: in memory, or on a fresh SQLite / PostgreSQL server database."""
    if request.param == "memory":
        yield MemoryJobStore()
        return
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else tmp_path / "j.db"
    db = open_server_db(str(url), durability="normal")
    try:
        yield store_for(db)
    finally:
        db.close()
