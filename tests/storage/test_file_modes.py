"""Files pigeon creates are its owner's alone (0600), whatever the umask: the server
database, the edge queue file, their -wal and -shm, the queue's side files, key files."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.edge.queue import OfflineQueue
from pigeon.storage.crypto import Keyring, generate_key, key_entry
from pigeon.storage.files import write_private
from pigeon.storage.server import open_server_db


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o000)  # the worst case: everything pigeon does not restrict is 0666
    try:
        yield
    finally:
        os.umask(old)


def _modes(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (0600 expected) and folder (0700), by relative path."""
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*")}


def test_the_server_database_and_its_wal_and_shm_are_0600(tmp_path: Path) -> None:
    db = open_server_db(tmp_path / "server.db")
    try:
        with db.transaction() as tx:
            tx.sql("SELECT 1")
        modes = _modes(tmp_path)
    finally:
        db.close()
    assert {"server.db", "server.db-wal", "server.db-shm"} <= set(modes)
    assert modes == dict.fromkeys(modes, 0o600)


def test_the_edge_queue_file_and_its_side_files_are_0600(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db") as queue:
        queue.enqueue("create", "note:1", {"x": 1})
        queue.next_batch(1)  # in flight: the owner file exists
        modes = _modes(tmp_path)
    assert {"q.db", "q.db-wal", "q.db-shm", "q.db-lock"} <= set(modes)
    folders = {name for name in modes if (tmp_path / name).is_dir()}
    assert folders, modes  # the owner files' folder
    assert modes == {name: 0o700 if name in folders else 0o600 for name in modes}, modes


def test_an_existing_file_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch()
    path.chmod(0o640)
    open_server_db(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_key_files_are_written_0600_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    write_private(path, key_entry("k1", generate_key()) + "\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Keyring.from_file(path).ids == ("k1",)
    assert _modes(tmp_path) == {"keys": 0o600}  # no temporary file left behind
