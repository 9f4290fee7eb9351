"""Base versions: sent as If-Match, taken when the operation leaves, not when it was made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.base import Database
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from tests.sync.conftest import FAST


@pytest.fixture
def transport(db: Database) -> Iterator[InProcessTransport]:
    with InProcessTransport(create_notes_app(db, purge_interval=None), batch=True) as t:
        yield t


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[OfflineQueue]:
    with OfflineQueue(tmp_path / "edge.db", QueueOptions(retry_policy=FAST, coalesce=False)) as q:
        yield q


def test_an_update_made_while_the_previous_one_is_in_flight_does_not_conflict_with_it(
    queue: OfflineQueue, transport: InProcessTransport, db: Database
) -> None:
    engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
    queue.enqueue("create", "note:a", {"id": "a", "text": "v1"})
    assert engine.flush(timeout=5) and queue.base_version("note:a") == "1"
    first = queue.enqueue("update", "note:a", {"text": "v2"})
    [in_flight] = queue.next_batch()
    second = queue.enqueue("update", "note:a", {"text": "v3"})  # made while v2 is on its way
    queue.release(in_flight.id)
    assert engine.drain(timeout=5)
    assert queue.get(first.id).status is OpStatus.DELIVERED
    assert queue.get(second.id).status is OpStatus.DELIVERED
    assert [e["version"] for e in read_ledger(db)] == [1, 2, 3]
    assert queue.base_version("note:a") == "3"


def test_the_known_version_really_is_sent_as_if_match(
    queue: OfflineQueue, transport: InProcessTransport, db: Database
) -> None:
    conflicts = []
    engine = SyncEngine(
        queue,
        transport,
        callbacks=SyncCallbacks(on_conflict=lambda op, outcome: conflicts.append(outcome.status)),
        connectivity=ManualMonitor(),
    )
    queue.enqueue("create", "note:b", {"id": "b", "text": "v1"})
    assert engine.flush(timeout=5)
    # Another device moves the note to version 2 behind this one's back.
    with InProcessTransport(create_notes_app(db, purge_interval=None)) as other:
        reply = other.client.put(
            "/notes/b", json={"text": "other"}, headers={"Idempotency-Key": "o"}
        )
        assert reply.status_code == 200
    stale = queue.enqueue("update", "note:b", {"text": "mine"})
    assert engine.flush(timeout=5)
    assert conflicts == [412] and queue.get(stale.id).status is OpStatus.CONFLICT
