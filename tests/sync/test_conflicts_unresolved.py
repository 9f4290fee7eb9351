"""A conflict with no resolver to settle it is held for the user with a record, shown by
``pigeon conflicts list`` (which agrees with ``pigeon queue stats``), settled by ``pigeon
conflicts resolve``, and taken over by an engine started later with a resolver.

Real queue files, the real notes server over uvicorn, the real HTTP transport and CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.conflicts import NO_RESOLVER, ConflictStore
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.reference import schema as ref
from pigeon.reference.notes import create_notes_app
from pigeon.storage.base import Database
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.resolver import ConflictPolicy, ConflictResolver, Strategy
from tests.protocol.wire_app import LiveServer
from tests.sync.conftest import FAST
from tests.waiting import wait_for

runner = CliRunner()


@pytest.fixture
def notes(sqlite_db: Database) -> Iterator[LiveServer]:
    server = LiveServer(create_notes_app(sqlite_db, purge_interval=None))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def phone(tmp_path: Path) -> Iterator[OfflineQueue]:
    with OfflineQueue(
        tmp_path / "phone.db", QueueOptions(retry_policy=FAST, coalesce=False)
    ) as queue:
        yield queue


class Devices:
    def __init__(self, notes: LiveServer, tmp_path: Path) -> None:
        self.notes = notes
        self.tmp_path = tmp_path
        self.made: list[tuple[SyncEngine, HttpTransport]] = []

    def engine(self, queue: OfflineQueue, **options: Any) -> SyncEngine:
        transport = HttpTransport(self.notes.url, token="alice.v1")
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor(), **options)
        self.made.append((engine, transport))
        return engine

    def laptop_writes(self, type_: str, entity: str, payload: Any) -> None:
        """Another device of the same user writes, and syncs."""
        with OfflineQueue(self.tmp_path / "laptop.db", QueueOptions(retry_policy=FAST)) as laptop:
            engine = self.engine(laptop)
            engine.enqueue(type_, entity, payload)
            assert engine.drain(timeout=10)
            engine.close()


@pytest.fixture
def devices(notes: LiveServer, tmp_path: Path) -> Iterator[Devices]:
    made = Devices(notes, tmp_path)
    yield made
    for engine, transport in made.made:
        engine.close()
        transport.close()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    return result.exit_code, result.output


def stats_conflicts(path: Path) -> int:
    code, output = cli("queue", "stats", "-f", str(path))
    assert code == 0
    [count] = re.findall(r"│\s*conflicts\s*│\s*(\d+)\s*│", output)
    return int(count)


def listed(path: Path, *more: str) -> str:
    code, output = cli("conflicts", "list", "-f", str(path), *more)
    assert code == 0, output
    return output


def shown(path: Path) -> int:
    """The conflicts `pigeon queue stats` counts, once `pigeon conflicts list` has said the
    same number."""
    count = stats_conflicts(path)
    assert f"{count} conflict(s)" in listed(path)
    return count


def stale_update(devices: Devices, engine: SyncEngine) -> Operation:
    """note:1 made and synced, then changed by the laptop: an update of it made here now
    is answered 412 once sent."""
    engine.enqueue("create", "note:1", {"id": "1", "body": "v1"})
    assert engine.flush(timeout=10)
    devices.laptop_writes("update", "note:1", {"id": "1", "body": "theirs"})
    return engine.enqueue("update", "note:1", {"id": "1", "body": "mine"})


def resolve(path: Path, conflict_id: int, keep: str) -> tuple[int, str]:
    return cli("conflicts", "resolve", "-f", str(path), str(conflict_id), "--keep", keep)


def held_ids(queue: OfflineQueue) -> list[int]:
    return [r.id for r in ConflictStore(queue).records("held")]


def server_note(sqlite_db: Database, note_id: str) -> Any:
    with sqlite_db.transaction() as tx:
        row = ref.fetchone(tx, "note_get", {"principal": "alice", "id": note_id})
    assert row is not None
    return json.loads(row["data"])


def test_a_create_answered_409_without_a_resolver_is_listed_and_resolved_keeping_local(
    devices: Devices, phone: OfflineQueue, sqlite_db: Database
) -> None:
    devices.laptop_writes("create", "note:42", {"id": "42", "title": "Groceries", "body": "tea"})
    engine = devices.engine(phone)  # the README's first sample: no resolver
    create = engine.enqueue("create", "note:42", {"id": "42", "title": "Groceries", "body": "eggs"})
    engine.enqueue("update", "note:42", {"id": "42", "title": "Groceries", "body": "eggs, milk"})
    other = engine.enqueue("create", "note:7", {"id": "7", "title": "Other", "body": "x"})
    assert engine.flush(timeout=10)
    assert phone.get(create.id).status is OpStatus.CONFLICT
    assert phone.get(other.id).status is OpStatus.DELIVERED  # blocks only its entity
    [record] = ConflictStore(phone).records("held")
    assert record.op_id == create.id and record.strategy == NO_RESOLVER
    assert record.local == {"id": "42", "title": "Groceries", "body": "eggs, milk"}
    assert record.remote == {"title": "Groceries", "body": "tea"}
    assert record.remote_version == "1" and "409" in (record.detail or "")
    # (c): what `queue stats` counts is what `conflicts list` lists.
    assert stats_conflicts(phone.path) == 1
    output = listed(phone.path)
    assert "1 conflict(s)" in output and "note:42" in output and "tea" in output
    assert "1 conflict(s)" in listed(phone.path, "--all")
    code, output = resolve(phone.path, record.id, "local")
    assert code == 0 and "queued against version 1" in output, output
    assert engine.flush(timeout=10)
    assert server_note(sqlite_db, "42") == {"title": "Groceries", "body": "eggs, milk"}
    assert shown(phone.path) == 0
    assert phone.stats().depth == 0


def test_an_update_answered_412_without_a_resolver_is_resolved_keeping_remote(
    devices: Devices, phone: OfflineQueue, sqlite_db: Database
) -> None:
    engine = devices.engine(phone)
    stale = stale_update(devices, engine)
    assert engine.flush(timeout=10)
    assert phone.get(stale.id).status is OpStatus.CONFLICT
    [record] = ConflictStore(phone).records("held")
    assert record.remote == {"body": "theirs"} and record.remote_version == "2"
    assert record.local == {"id": "1", "body": "mine"}
    assert shown(phone.path) == 1
    code, output = resolve(phone.path, record.id, "remote")
    assert code == 0 and "nothing to send" in output
    assert engine.flush(timeout=10) and phone.stats().depth == 0
    assert server_note(sqlite_db, "1") == {"body": "theirs"}
    assert shown(phone.path) == 0


@pytest.mark.parametrize("mode", ["drain", "start"])
def test_an_engine_started_later_with_a_resolver_settles_what_was_held_without_one(
    devices: Devices, phone: OfflineQueue, sqlite_db: Database, mode: str
) -> None:
    engine = devices.engine(phone)
    engine.enqueue("create", "note:1", {"id": "1", "title": "Trip", "done": False})
    assert engine.flush(timeout=10)
    devices.laptop_writes("update", "note:1", {"id": "1", "title": "Trip", "done": True})
    stale = engine.enqueue("update", "note:1", {"id": "1", "title": "Trip to Rome", "done": False})
    assert engine.flush(timeout=10)
    engine.close()
    [held] = held_ids(phone)
    merges: list[tuple[Any, Any, Any]] = []

    def merge(base: Any, local: Any, remote: Any) -> Any:
        merges.append((base, local, remote))
        return {**remote, "title": local["title"]}

    resolver = ConflictResolver(phone, {"note": ConflictPolicy(Strategy.CUSTOM, merge=merge)})
    later = devices.engine(phone, resolver=resolver)
    if mode == "drain":
        assert later.drain(timeout=10)
    else:  # the background loop looks when it starts
        later.start()
        wait_for(lambda: phone.stats().depth == 0 and held_ids(phone) == [], 5.0, interval=0.01)
    assert merges == [
        (None, {"id": "1", "title": "Trip to Rome", "done": False}, {"title": "Trip", "done": True})
    ]
    assert server_note(sqlite_db, "1") == {"title": "Trip to Rome", "done": True}
    with pytest.raises(Exception, match=stale.id):
        phone.get(stale.id)  # settled: replaced by the merge, sent with a new key
    store = ConflictStore(phone)
    assert store.get(held).outcome == "resolved" and store.get(held).resolution == "resolver"
    assert [r.outcome for r in store.records() if r.id != held] == ["merged"]
    assert phone.stats().conflicts == 0 and held_ids(phone) == []
    assert shown(phone.path) == 0


def test_a_later_user_policy_keeps_it_held_for_the_user(
    devices: Devices, phone: OfflineQueue
) -> None:
    engine = devices.engine(phone)
    stale = stale_update(devices, engine)
    assert engine.flush(timeout=10)
    engine.close()
    later = devices.engine(phone, resolver=ConflictResolver(phone, {"note": Strategy.USER}))
    assert later.flush(timeout=10)
    [record] = ConflictStore(phone).records("held")
    assert record.strategy == "user" and record.op_id == stale.id
    assert record.remote == {"body": "theirs"}
    assert later.flush(timeout=10)  # waited on by the user now: not sent again
    assert ConflictStore(phone).records("held") == [record]
    assert shown(phone.path) == 1


def hold_without_record(queue: OfflineQueue, entity: str, payload: Any) -> str:
    """A conflict held with no record of it (a file from an older pigeon, a crash between
    the hold and its record)."""
    op = queue.enqueue("update", entity, payload, base_version="1")
    [sent] = queue.next_batch()
    queue.mark_failed(sent.id, "HTTP 412: base version is stale", kind="conflict")
    return op.id


def test_conflicts_list_records_unrecorded_holds_and_closes_records_of_discarded_ops(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queue.db"
    with OfflineQueue(path) as queue:
        first = hold_without_record(queue, "note:1", {"body": "mine"})
    assert stats_conflicts(path) == 1
    output = listed(path)
    assert "1 conflict(s)" in output and NO_RESOLVER in output and "mine" in output
    assert "1 conflict(s)" in listed(path)  # recorded once, not once per listing
    with OfflineQueue(path) as queue:
        [record] = ConflictStore(queue).records("held")
        assert record.op_id == first and record.remote is None
    code, _ = cli("queue", "discard", "-f", str(path), first)
    assert code == 0
    assert shown(path) == 0
    with OfflineQueue(path) as queue:
        assert ConflictStore(queue).get(record.id).resolution == "gone"


def test_an_engine_without_a_resolver_records_unrecorded_holds_and_the_user_resolves(
    devices: Devices, phone: OfflineQueue, sqlite_db: Database
) -> None:
    engine = devices.engine(phone)
    engine.enqueue("create", "note:1", {"id": "1", "body": "v1"})
    assert engine.flush(timeout=10)
    engine.close()
    held = hold_without_record(phone, "note:1", {"id": "1", "body": "mine"})
    engine = devices.engine(phone)  # the app starts again: its first flush looks
    assert engine.flush(timeout=10)
    [record] = ConflictStore(phone).records("held")
    assert record.op_id == held and record.local == {"id": "1", "body": "mine"}
    code, output = resolve(phone.path, record.id, "local")
    assert code == 0, output
    assert engine.flush(timeout=10) and phone.stats().depth == 0
    assert server_note(sqlite_db, "1") == {"body": "mine"}  # the user chose: sent unconditionally
