"""The engine against the reference server (pigeon.reference.notes): real intake, real SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.base import Database
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from tests.protocol.wire_app import LiveServer
from tests.sync.conftest import FAST


@pytest.fixture
def notes_server(sqlite_db: Database) -> Iterator[LiveServer]:
    server = LiveServer(create_notes_app(sqlite_db, purge_interval=None))
    server.start()
    yield server
    server.stop()


def make_ops(queue: OfflineQueue, notes: int) -> list[Any]:
    made = []
    for n in range(notes):
        made.append(queue.enqueue("create", f"note:n{n}", {"id": f"n{n}", "text": "v1"}))
    for n in range(notes):
        made.append(queue.enqueue("update", f"note:n{n}", {"text": "v2"}))
    for n in range(0, notes, 2):
        made.append(queue.enqueue("update", f"note:n{n}", {"text": "v3"}))
    return made


def check_exactly_once_in_order(sqlite_db: Database, queue: OfflineQueue, made: list[Any]) -> None:
    ledger = read_ledger(sqlite_db)
    assert sorted(row["idempotency_key"] for row in ledger) == sorted(
        op.idempotency_key for op in made
    )
    position = {row["idempotency_key"]: row["seq"] for row in ledger}
    by_entity: dict[str, list[int]] = {}
    for op in made:  # made is in creation order
        by_entity.setdefault(op.entity, []).append(position[op.idempotency_key])
    assert all(seqs == sorted(seqs) for seqs in by_entity.values())
    assert all(queue.get(op.id).status is OpStatus.DELIVERED for op in made)


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_every_operation_once_and_in_order_over_uvicorn(
    tmp_path: Path, sqlite_db: Database, notes_server: LiveServer, batch: bool
) -> None:
    with (
        OfflineQueue(
            tmp_path / "edge.db", QueueOptions(retry_policy=FAST, coalesce=False)
        ) as queue,
        HttpTransport(notes_server.url, token="alice.v1", batch=batch) as transport,
    ):
        made = make_ops(queue, 6)
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
        assert engine.drain(timeout=10)
        check_exactly_once_in_order(sqlite_db, queue, made)
        assert queue.base_version("note:n0") == "3" and queue.base_version("note:n1") == "2"
        # Sending everything again (a client that lost its delivery records) changes nothing.
        report = engine.executor.transport.send(made)
        assert all(reply.replayed for _, reply in report.replies)
        assert len(read_ledger(sqlite_db)) == len(made)


def test_stale_if_match_is_a_conflict_with_the_current_note(
    tmp_path: Path, sqlite_db: Database
) -> None:
    app = create_notes_app(sqlite_db, purge_interval=None)
    with (
        OfflineQueue(
            tmp_path / "edge.db", QueueOptions(retry_policy=FAST, coalesce=False)
        ) as queue,
        InProcessTransport(app, token="alice.v1", batch=True) as transport,
    ):
        conflicts = []
        engine = SyncEngine(
            queue,
            transport,
            callbacks=SyncCallbacks(on_conflict=lambda op, outcome: conflicts.append(outcome)),
            connectivity=ManualMonitor(),
        )
        engine.enqueue("create", "note:a", {"id": "a", "text": "v1"})
        assert engine.flush(timeout=5)
        stale = engine.enqueue("update", "note:a", {"text": "mine"}, base_version="7")
        assert engine.flush(timeout=5)
        assert queue.get(stale.id).status is OpStatus.CONFLICT
        assert [(c.status, c.body["version"], c.body["data"]) for c in conflicts] == [
            (412, 1, {"text": "v1"})
        ]
        assert len(read_ledger(sqlite_db)) == 1
