"""Deep structures and a full disk end in pigeon's own typed errors, with nothing written:
``PayloadInvalid`` (not the encoder's RecursionError), ``StorageFull`` (not
sqlite3.OperationalError / psycopg's DiskFull), the latter mapped in the storage layer so
every store gets it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from pigeon.core import wire
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.validate import json_depth
from pigeon.exceptions import InvalidOperation, PayloadInvalid, StorageFull
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.storage.server import open_server_db


def nested(depth: int, kind: type = dict) -> Any:
    value: Any = {} if kind is dict else []
    for _ in range(depth - 1):
        value = {"a": value} if kind is dict else [value]
    return value


@pytest.mark.parametrize("depth", [10_000, wire.MAX_JSON_DEPTH + 1])
@pytest.mark.parametrize("kind", [dict, list])
def test_too_deep_a_payload_is_payload_invalid_and_nothing_is_stored(
    tmp_path: Path, depth: int, kind: type
) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        q.enqueue("create", "note:0", {"before": True})
        with pytest.raises(PayloadInvalid, match=f"deeper than {wire.MAX_JSON_DEPTH}"):
            q.enqueue("create", "note:1", {"deep": nested(depth, kind)})
        assert [o.entity for o in q.pending] == ["note:0"]
        assert q.stats().depth == 1


def test_the_deepest_allowed_payload_is_stored(tmp_path: Path) -> None:
    value = nested(wire.MAX_JSON_DEPTH)
    assert json_depth(value) == wire.MAX_JSON_DEPTH
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        assert q.enqueue("create", "note:1", value).payload == value


def test_payload_invalid_is_the_edge_input_error() -> None:
    assert issubclass(PayloadInvalid, InvalidOperation)
    assert issubclass(PayloadInvalid, ValueError)


def _fill(q: OfflineQueue) -> None:
    """Cap this thread's connection at the pages the file has now (SQLITE_FULL after)."""
    conn = q._store.db.connection()
    pages = conn.execute("PRAGMA page_count").fetchone()["page_count"]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def test_full_disk_is_storage_full_from_enqueue_and_nothing_is_written(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        q.enqueue("create", "note:0", {"before": True})
        _fill(q)
        with pytest.raises(StorageFull, match="full") as caught:
            for i in range(1, 200):  # the last page may have room for a row or two
                q.enqueue("create", f"note:{i}", {"body": "x" * 1500})
        assert caught.value.__cause__ is not None  # the driver's error, kept as the cause
        written = [o.entity for o in q.pending]
        assert "note:0" in written and len(written) == i  # the refused one is not there
        assert f"note:{i}" not in written
    with OfflineQueue(
        tmp_path / "q.db", QueueOptions(durability="normal")
    ) as again:  # still usable
        assert [o.entity for o in again.pending] == written


def test_full_disk_in_a_group_commit_fails_every_item_of_it(tmp_path: Path) -> None:
    """Several threads' enqueues in one transaction: the batch is retried one savepoint
    per item, where SQLITE_FULL must still end the whole transaction as StorageFull."""
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            conn = q._store.db.connection()
            conn.execute("PRAGMA max_page_count = 1")  # held at the file's size: no growth
            for i in range(20):
                try:
                    q.enqueue("create", f"note:{n}-{i}", {"body": "x" * 500})
                except BaseException as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(errors) > 60  # a row or two may fit in the file's last pages
        assert all(isinstance(e, StorageFull) for e in errors), {type(e) for e in errors}
        assert len(q.pending) == 80 - len(errors)  # nothing of a refused one was written


def test_storage_full_is_mapped_for_every_sqlite_store(tmp_path: Path) -> None:
    """The server's stores (here a job enqueue) get the same mapping: it is the storage
    layer's, not the edge queue's."""
    db = open_server_db(str(tmp_path / "server.db"), durability="normal")
    try:
        manager = JobManager(db)
        manager.enqueue(JobSpec("default", "t", {"n": 0}))
        conn = db.connection()  # type: ignore[attr-defined]
        conn.execute("PRAGMA max_page_count = 1")
        with pytest.raises(StorageFull):
            for n in range(1, 200):
                manager.enqueue(JobSpec("default", "t", {"n": n, "pad": "x" * 2000}))
        conn.execute("PRAGMA max_page_count = 1073741823")
        with db.transaction() as tx:
            count = tx.sql("SELECT count(*) AS n FROM pigeon_jobs").fetchone()["n"]
        assert count == n  # the refused job is not there
    finally:
        db.close()


def test_disk_full_is_storage_full_on_postgres(pg_url: str) -> None:
    """PostgreSQL's disk_full (SQLSTATE 53100), raised by the server itself: the same
    StorageFull, not StoreUnavailable, and the transaction's writes rolled back."""
    db = open_server_db(pg_url)
    try:
        manager = JobManager(db)
        with pytest.raises(StorageFull, match="disk full"), db.transaction() as tx:
            from pigeon.jobs.manager import enqueue

            enqueue(tx, JobSpec("default", "t", {"n": 1}))
            tx.sql(
                "DO $$ BEGIN RAISE EXCEPTION 'could not extend file' "
                "USING ERRCODE = 'disk_full'; END $$"
            )
        with db.transaction() as tx:
            assert tx.sql("SELECT count(*) AS n FROM pigeon_jobs").fetchone()["n"] == 0
        manager.enqueue(JobSpec("default", "t", {"n": 2}))  # and the store goes on
    finally:
        db.close()
