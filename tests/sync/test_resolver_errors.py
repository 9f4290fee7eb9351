"""A conflict resolver that fails must leave the conflict held, visible and resolvable.

Real queues, the real notes server (in process), the real engine with a resolver whose
merge function raises on the data it meets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference import schema as ref
from pigeon.reference.notes import create_notes_app
from pigeon.storage.base import Database
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from pigeon.sync.resolver import ConflictPolicy, ConflictResolver, Strategy
from tests.sync.conftest import FAST


class MergeBroke(Exception):
    pass


def broken_merge(base: Any, local: Any, remote: Any) -> Any:
    raise MergeBroke(f"cannot merge {local!r} into {remote!r}")


@pytest.fixture
def app(sqlite_db: Database) -> Any:
    return create_notes_app(sqlite_db, purge_interval=None)


def note(sqlite_db: Database, note_id: str) -> Any:
    with sqlite_db.transaction() as tx:
        row = ref.fetchone(tx, "note_get", {"principal": "alice", "id": note_id})
    assert row is not None
    return json.loads(row["data"])


def test_a_merge_function_that_raises_holds_the_conflict_and_reports_the_error(
    tmp_path: Path, app: Any, sqlite_db: Database
) -> None:
    phone_q = OfflineQueue(tmp_path / "phone.db", QueueOptions(retry_policy=FAST))
    laptop_q = OfflineQueue(tmp_path / "laptop.db", QueueOptions(retry_policy=FAST))
    errors: list[BaseException] = []
    told: list[str] = []
    resolver = ConflictResolver(
        laptop_q, {"note": ConflictPolicy(Strategy.CUSTOM, merge=broken_merge)}
    )
    with (
        InProcessTransport(app, token="alice.phone", batch=True) as phone_t,
        InProcessTransport(app, token="alice.laptop", batch=True) as laptop_t,
    ):
        phone = SyncEngine(phone_q, phone_t, connectivity=ManualMonitor())
        laptop = SyncEngine(
            laptop_q,
            laptop_t,
            callbacks=SyncCallbacks(
                on_error=errors.append, on_conflict=lambda op, outcome: told.append(op.id)
            ),
            connectivity=ManualMonitor(),
            resolver=resolver,
        )
        phone_q.enqueue("create", "note:1", {"id": "1", "body": "v1"}, endpoint="/notes")
        assert phone.drain(timeout=10)
        laptop_q.set_base_version("note:1", phone_q.base_version("note:1"))
        phone_q.enqueue("update", "note:1", {"body": "phone"}, endpoint="/notes/1")
        assert phone.drain(timeout=10)
        mine = laptop_q.enqueue("update", "note:1", {"body": "laptop"}, endpoint="/notes/1")
        assert laptop.drain(timeout=10)  # a held conflict is not pending

        # Held, as an unresolved conflict the user can see and settle; the app heard of it.
        assert laptop_q.get(mine.id).status is OpStatus.CONFLICT
        assert told == [mine.id]
        [held] = resolver.store.records("held")
        assert held.op_id == mine.id and held.remote == {"body": "phone"}
        assert held.detail is not None and "MergeBroke" in held.detail
        # ... and the failure went where the engine's failures go.
        assert [type(e) for e in errors] == [MergeBroke]
        assert laptop.last_error is errors[0]

        # The way forward: the user's choice settles it like any held conflict.
        resolver.store.resolve(held.id, "local")
        assert laptop.drain(timeout=10)
        assert note(sqlite_db, "1") == {"body": "laptop"}
        assert laptop_q.stats().depth == 0
    phone_q.close()
    laptop_q.close()
