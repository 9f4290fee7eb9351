"""The workers' registry on a real database: a stopping worker's delete waits for the
database no longer than it is given, so a lock held elsewhere cannot keep the process
past its supervisor's grace (which would kill it, its row left to age out)."""

from __future__ import annotations

import time

import pytest

from pigeon.jobs.app import App
from pigeon.jobs.registry import Advert, live_workers
from pigeon.jobs.stores import store_for
from pigeon.storage.base import Database
from tests.databases import tables_locked


def test_withdraw_gives_up_by_its_deadline_and_says_so(
    db: Database, server_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_for(db)
    app = App()
    app.queue("q")
    advert = Advert(store, "w-1", app, ["q"])
    assert advert.advertise()
    with tables_locked(server_db_url, "pigeon_workers"):
        started = time.monotonic()
        advert.withdraw(until=started + 0.5)
        took = time.monotonic() - started
    assert 0.4 < took < 3.0, took  # waited until its deadline, not the busy timeout (30 s)
    assert "could not withdraw worker w-1" in caplog.text
    assert [w.name for w in live_workers(store)] == ["w-1"]  # left to age out
    advert.withdraw()  # the lock gone: deleted
    assert live_workers(store) == []
