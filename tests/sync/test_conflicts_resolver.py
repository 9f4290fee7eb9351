"""Two devices edit the same entities offline, reconnect, and each strategy does its job.

Real queues (SQLite files), the real notes app with its LWW and CRDT collections, the
real HTTP transport (in-process ASGI), the real engine with a resolver."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pycrdt import Doc, Text

from pigeon.core.operation import OpStatus
from pigeon.edge.merge import SEPARATOR, notes_merge
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference import schema as ref
from pigeon.reference.conflicts import read_outcomes
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.base import Database
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.resolver import ConflictPolicy, ConflictResolver, Strategy
from tests.sync.conftest import FAST

POLICIES: dict[str, Strategy | ConflictPolicy] = {
    "card": Strategy.FIELD_MERGE,
    "note": ConflictPolicy(Strategy.CUSTOM, merge=notes_merge),
    "draft": Strategy.USER,
    "lww-note": Strategy.LWW,
    "doc": Strategy.CRDT,
}


@dataclass
class Device:
    queue: OfflineQueue
    resolver: ConflictResolver
    engine: SyncEngine

    def edit(
        self,
        type_: str,
        entity: str,
        payload: Any,
        endpoint: str | None = None,
        method: str | None = None,
    ) -> Any:
        if method is None and endpoint:
            method = {"create": "POST", "update": "PUT"}[type_]
        return self.queue.enqueue(type_, entity, payload, endpoint=endpoint, method=method)

    def sync(self) -> None:
        assert self.engine.drain(timeout=10)


# Between two devices' edits: more than the server can mismeasure a device's offset
# (its clock at sending against the server's at arrival) when the machine is loaded.
EDIT_GAP = 0.3


@pytest.fixture
def make_device(tmp_path: Path, sqlite_db: Database) -> Iterator[Callable[..., Device]]:
    app = create_notes_app(
        sqlite_db, purge_interval=None, lww_collections=["lww-notes"], crdt_collections=["docs"]
    )
    made: list[tuple[Device, InProcessTransport]] = []

    def make(name: str, now: Callable[[], float] = time.time) -> Device:
        queue = OfflineQueue(tmp_path / f"{name}.db", QueueOptions(retry_policy=FAST), now=now)
        resolver = ConflictResolver(queue, POLICIES)
        transport = InProcessTransport(
            app, token=f"alice.{name}", batch=True, headers=resolver.headers
        )
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor(), resolver=resolver)
        device = Device(queue, resolver, engine)
        made.append((device, transport))
        return device

    yield make
    for device, transport in made:
        device.engine.stop()
        transport.close()
        device.queue.close()


def shared(phone: Device, laptop: Device, entity: str, data: dict[str, Any]) -> None:
    """The phone creates an entity and both devices sync, so both hold it as their base."""
    ident = entity.partition(":")[2]
    phone.edit("create", entity, {"id": ident, **data}, endpoint="/notes")
    phone.sync()
    laptop.queue.set_base_version(entity, phone.queue.base_version(entity))
    snapshot = phone.resolver.store.snapshot(entity)
    assert snapshot is not None and snapshot.version == "1"
    laptop.resolver.store.remember(entity, snapshot.version, snapshot.data)


def server_note(sqlite_db: Database, note_id: str) -> Any:
    with sqlite_db.transaction() as tx:
        row = ref.fetchone(tx, "note_get", {"principal": "alice", "id": note_id})
    assert row is not None
    return json.loads(row["data"])


def test_field_merge_keeps_edits_to_different_fields(
    make_device: Callable[..., Device], sqlite_db: Database
) -> None:
    phone, laptop = make_device("phone"), make_device("laptop")
    shared(phone, laptop, "card:1", {"title": "Trip", "colour": "blue", "done": False})
    phone.edit(
        "update",
        "card:1",
        {"title": "Trip to Rome", "colour": "blue", "done": False},
        endpoint="/notes/1",
    )
    laptop.edit(
        "update", "card:1", {"title": "Trip", "colour": "red", "done": True}, endpoint="/notes/1"
    )
    phone.sync()
    laptop.sync()  # 412, merged, sent again with a new key against version 2
    assert server_note(sqlite_db, "1") == {"title": "Trip to Rome", "colour": "red", "done": True}
    [record] = laptop.resolver.store.records()
    assert record.outcome == "merged" and record.remote_version == "2"
    assert laptop.queue.stats().depth == 0 and laptop.queue.base_version("card:1") == "3"


def test_the_custom_notes_merge_keeps_both_texts(
    make_device: Callable[..., Device], sqlite_db: Database
) -> None:
    phone, laptop = make_device("phone"), make_device("laptop")
    shared(phone, laptop, "note:2", {"body": "milk"})
    phone.edit("update", "note:2", {"body": "milk, eggs"}, endpoint="/notes/2")
    laptop.edit("update", "note:2", {"body": "milk, bread"}, endpoint="/notes/2")
    laptop.sync()
    phone.sync()
    assert server_note(sqlite_db, "2") == {"body": f"milk, eggs{SEPARATOR}milk, bread"}


def test_user_resolution_holds_the_entity_and_sends_a_new_operation(
    make_device: Callable[..., Device], sqlite_db: Database
) -> None:
    phone, laptop = make_device("phone"), make_device("laptop")
    shared(phone, laptop, "draft:3", {"body": "v1"})
    phone.edit("update", "draft:3", {"body": "phone"}, endpoint="/notes/3")
    phone.sync()
    first = laptop.edit("update", "draft:3", {"body": "laptop"}, endpoint="/notes/3")
    laptop.sync()
    later = laptop.edit("update", "draft:3", {"body": "laptop, again"}, endpoint="/notes/3")
    other = laptop.edit("update", "card:9", {"x": 1}, endpoint="/notes/9")
    laptop.engine.flush(timeout=5)
    # The conflict holds the draft's later edit, not other entities.
    assert laptop.queue.get(first.id).status is OpStatus.CONFLICT
    assert laptop.queue.get(later.id).status is OpStatus.PENDING
    assert laptop.queue.get(other.id).status is not OpStatus.PENDING
    [held] = laptop.resolver.store.records("held")
    assert held.local == {"body": "laptop"} and held.remote == {"body": "phone"}
    new = laptop.resolver.store.resolve(held.id, "local")
    assert new is not None and new.idempotency_key not in (first.idempotency_key,)
    assert new.base_version == "2"
    laptop.sync()
    assert server_note(sqlite_db, "3") == {"body": "laptop, again"}
    outcomes = {r.op_id: r.outcome for r in laptop.resolver.store.records()}
    assert outcomes == {first.id: "resolved", later.id: "superseded"}
    keys = {e["idempotency_key"] for e in read_ledger(sqlite_db)}
    assert first.idempotency_key not in keys and later.idempotency_key not in keys


@pytest.mark.parametrize("keep", ["remote", "both", "merged"])
def test_user_resolution_choices(
    make_device: Callable[..., Device], sqlite_db: Database, keep: str
) -> None:
    phone, laptop = make_device("phone"), make_device("laptop")
    shared(phone, laptop, "draft:4", {"body": "v1"})
    phone.edit("update", "draft:4", {"body": "phone"}, endpoint="/notes/4")
    phone.sync()
    laptop.edit("update", "draft:4", {"body": "laptop"}, endpoint="/notes/4")
    laptop.engine.flush(timeout=5)
    [held] = laptop.resolver.store.records("held")
    merged = {"body": "phone + laptop"} if keep == "merged" else None
    laptop.resolver.store.resolve(held.id, keep, merged)  # type: ignore[arg-type]
    laptop.sync()
    expected = {"remote": {"body": "phone"}, "both": {"body": "phone"}, "merged": merged}[keep]
    assert server_note(sqlite_db, "4") == expected
    if keep == "both":
        assert server_note(sqlite_db, f"4-conflicted-copy-{held.id}") == {"body": "laptop"}
    assert laptop.queue.stats().depth == 0
    assert laptop.resolver.store.get(held.id).resolution == keep


def test_lww_loser_is_told_and_recorded_on_both_sides(
    make_device: Callable[..., Device], sqlite_db: Database
) -> None:
    phone, laptop = make_device("phone"), make_device("laptop")
    laptop.edit("update", "lww-note:5", {"text": "laptop, earlier"})
    time.sleep(EDIT_GAP)
    phone.edit("update", "lww-note:5", {"text": "phone, later"})
    phone.sync()  # arrives first, greater clock
    laptop.sync()  # arrives last, smaller clock: lost
    [lost] = laptop.resolver.store.records("lost")
    assert lost.local == {"text": "laptop, earlier"} and lost.remote == {"text": "phone, later"}
    assert [o["outcome"] for o in read_outcomes(sqlite_db, "alice")] == ["lost"]
    snapshot = laptop.resolver.store.snapshot("lww-note:5")
    assert snapshot is not None and snapshot.data == {"text": "phone, later"}


def test_a_device_hours_fast_does_not_win_end_to_end(
    make_device: Callable[..., Device], sqlite_db: Database
) -> None:
    fast = make_device("fast", now=lambda: time.time() + 3 * 3600)
    right = make_device("right")
    fast.edit("update", "lww-note:6", {"text": "fast clock, earlier"})
    time.sleep(EDIT_GAP)
    right.edit("update", "lww-note:6", {"text": "right clock, later"})
    right.sync()
    fast.sync()  # its stamp says +3 h; its measured offset takes that off: it lost
    assert fast.resolver.store.records("lost")
    snapshot = fast.resolver.store.snapshot("lww-note:6")
    assert snapshot is not None and snapshot.data == {"text": "right clock, later"}


def test_crdt_documents_converge_on_both_devices(make_device: Callable[..., Device]) -> None:
    phone, laptop = make_device("phone"), make_device("laptop")
    replicas = {}
    for n, (device, word) in enumerate([(phone, "phone "), (laptop, "laptop ")]):
        doc: Doc[Any] = Doc(client_id=n + 1)
        text = doc.get("body", type=Text)
        text += word
        replicas[id(device)] = doc
        update = base64.b64encode(doc.get_update()).decode()
        device.edit("update", "doc:7", {"update": update}, method="PATCH")  # adds, not replaces
    phone.sync()
    laptop.sync()
    phone.edit(
        "update", "doc:7", {"update": base64.b64encode(b"\x00\x00").decode()}, method="PATCH"
    )
    phone.sync()  # an empty update: fetches the merged state
    for device in (phone, laptop):
        snapshot = device.resolver.store.snapshot("doc:7")
        assert snapshot is not None
        doc = replicas[id(device)]
        doc.apply_update(base64.b64decode(snapshot.data["state"]))
        assert sorted(str(doc.get("body", type=Text)).split()) == ["laptop", "phone"]
