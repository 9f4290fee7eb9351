"""Every jobs test opens its database through ``db`` / ``db_url``: it runs on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db


@pytest.fixture
def db_url(server_db_url: str) -> str:
    """The server database of one test: a SQLite file, then a fresh PostgreSQL database."""
    return server_db_url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = open_server_db(db_url, durability="normal")
    yield database
    database.close()
