from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "server.db"


@pytest.fixture
def db(db_path: Path) -> Iterator[Database]:
    database = open_server_db(db_path, durability="normal")
    yield database
    database.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
