"""``pigeon.storage.rotate``: re-sealing under the newest key in short batches, resumable,
beside a live writer; ``status`` counts values per key id. On both backends."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from pigeon.jobs import records
from pigeon.jobs.job import JobSpec
from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring, generate_key
from pigeon.storage.rotate import CLEAR, ColumnReport, rotate, status
from pigeon.storage.server import open_server_db

A = ("ka", generate_key())
B = ("kb", generate_key())
OLD, NEW = Keyring((A,)), Keyring((B, A))


@pytest.fixture
def url(server_db_url: str) -> str:
    return server_db_url


def _fill(url: str, keyring: Keyring | None, n: int) -> list[str]:
    db = open_server_db(url, keyring=keyring)
    try:
        ids = []
        for i in range(n):
            with db.transaction() as tx:
                spec = JobSpec("q", "t", {"i": i, "secret": "s"})
                ids.append(records.accept(tx, kind="k", data={"i": i}, obligations={"o": spec}))
        return ids
    finally:
        db.close()


def _open(url: str, keyring: Keyring | None) -> Iterator[Database]:
    db = open_server_db(url, keyring=keyring)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def new_db(url: str) -> Iterator[Database]:
    yield from _open(url, NEW)


def test_rotation_reseals_old_and_clear_values_under_the_current_key(
    url: str, new_db: Database
) -> None:
    clear = _fill(url, None, 3)
    old = _fill(url, OLD, 4)
    before = status(new_db)
    assert before["pigeon_records.data"] == Counter({CLEAR: 3, "ka": 4})
    assert before["pigeon_jobs.payload"] == Counter({CLEAR: 3, "ka": 4})
    reports = rotate(new_db, batch=2)
    assert reports["pigeon_records.data"].resealed == 7
    after = status(new_db)
    for name, counts in after.items():
        assert set(counts) <= {"kb"}, (name, counts)
    assert after["pigeon_records.data"] == Counter({"kb": 7})
    # Readable with the new key alone: the old one can be retired.
    for db in _open(url, Keyring((B,))):
        got = [records.get(db, rid)["data"]["i"] for rid in clear + old]
        assert got == [0, 1, 2, 0, 1, 2, 3]
    # A second run finds nothing left to do.
    again = rotate(new_db, batch=2)
    assert all(r.resealed == 0 for r in again.values())


def test_an_interrupted_rotation_resumes(url: str, new_db: Database) -> None:
    _fill(url, OLD, 5)
    calls = 0

    def stop_after_first(name: str, report: ColumnReport) -> None:
        nonlocal calls
        if name == "pigeon_records.data":
            calls += 1
            if calls == 1:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rotate(new_db, batch=2, progress=stop_after_first)
    assert status(new_db)["pigeon_records.data"] == Counter({"kb": 2, "ka": 3})
    rotate(new_db, batch=2)
    assert status(new_db)["pigeon_records.data"] == Counter({"kb": 5})


def test_values_under_a_key_not_in_the_keyring_are_reported_and_left(url: str) -> None:
    _fill(url, OLD, 2)
    lost = Keyring((("kc", generate_key()),))  # ka is gone
    for db in _open(url, lost):
        reports = rotate(db, batch=10)
        assert reports["pigeon_records.data"].missing == Counter({"ka": 2})
        assert status(db)["pigeon_records.data"] == Counter({"ka": 2})


def test_rotation_beside_a_live_writer_loses_nothing(url: str, new_db: Database) -> None:
    _fill(url, OLD, 30)
    written: list[str] = []
    done = threading.Event()

    def writer() -> None:
        for db in _open(url, NEW):
            while not done.is_set():
                with db.transaction() as tx:
                    written.append(records.accept(tx, kind="k", data={"w": uuid.uuid4().hex}))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        rotate(new_db, batch=3)
    finally:
        done.set()
        thread.join(30)
    assert written
    assert set(status(new_db)["pigeon_records.data"]) == {"kb"}
    for rid in written:
        assert "w" in records.get(new_db, rid)["data"]


def test_rotation_needs_a_keyring(url: str) -> None:
    for db in _open(url, None):
        with pytest.raises(ValueError, match="keyring"):
            rotate(db)
