"""New queue files get the small page size; files made before it keep theirs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite import APPLICATION_ID, PAGE_SIZE
from pigeon.storage.queries import migrations
from tests.storage.conftest import page_size


def test_a_new_queue_file_gets_the_edgepage_size(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path) as queue:
        queue.enqueue("create", "note:1", {"title": "a"})
    assert PAGE_SIZE == 2048
    assert page_size(path) == PAGE_SIZE


def test_an_existing_file_keeps_its_page_size_and_its_operations(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    for number, script in migrations("sqlite", "edge"):
        conn.executescript(script)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.close()
    with OfflineQueue(path) as queue:
        op = queue.enqueue("create", "note:1", {"title": "a"})
    assert page_size(path) == 4096
    with OfflineQueue(path) as queue:
        assert [o.id for o in queue.pending] == [op.id]
