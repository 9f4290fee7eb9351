"""Bad input is refused with a typed error naming the problem, and nothing is stored;
a file that is not ours, or is newer than us, is refused and left untouched."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import (
    ConfigurationError,
    EmptyEntity,
    ForeignDatabase,
    InvalidOperation,
    PayloadNotSerializable,
    PayloadTooLarge,
    SchemaTooNew,
    StoreUnavailable,
    UnknownOperationType,
)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("create", "note:1", {1, 2}), {}, PayloadNotSerializable, "JSON"),
        (("create", "note:1", {"x": object()}), {}, PayloadNotSerializable, "JSON"),
        (("create", "note:1", float("nan")), {}, PayloadNotSerializable, "JSON"),
        (("create", "note:1", "x" * 2000), {}, PayloadTooLarge, "limit of 1024"),
        (("create", "", {}), {}, EmptyEntity, "entity"),
        (("create", "   ", {}), {}, EmptyEntity, "entity"),
        (("create", None, {}), {}, EmptyEntity, "entity"),
        (("", "note:1", {}), {}, UnknownOperationType, "type"),
        (("explode", "note:1", {}), {}, UnknownOperationType, "'explode'"),
        (("create", "note:1", {}), {"method": "GET /x"}, InvalidOperation, "method"),
        (("update", "note:1", {}), {"method": "PTU"}, InvalidOperation, "not 'PTU'"),
        (("update", "note:1", {}), {"method": "GET"}, InvalidOperation, "a write"),
        (("create", "note:1", {}), {"endpoint": ""}, InvalidOperation, "endpoint"),
        (("update", "note:1", {}), {"base_version": ""}, InvalidOperation, "base_version"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(
    tmp_path: Path, args: tuple[Any, ...], kwargs: dict[str, Any], error: type, message: str
) -> None:
    allowed = ["create", "update", "delete"]
    with OfflineQueue(
        tmp_path / "q.db", QueueOptions(max_payload_bytes=1024, allowed_types=allowed)
    ) as q:
        q.enqueue("update", "note:0", {"before": True})
        with pytest.raises(error, match=message):
            q.enqueue(*args, **kwargs)
        assert [o.entity for o in q.pending] == ["note:0"]
        assert q.stats().depth == 1


def test_default_size_limit_is_one_mebibyte(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        q.enqueue("create", "blob:1", "x" * ((1 << 20) - 2))  # the quotes make it 1 MiB
        with pytest.raises(PayloadTooLarge):
            q.enqueue("create", "blob:2", "x" * (1 << 20))


def test_any_type_is_allowed_without_a_closed_set(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db") as q:
        assert q.enqueue("explode", "note:1", {}).type == "explode"


@pytest.mark.parametrize(
    "kwargs",
    [{"durability": "sometimes"}, {"max_payload_bytes": 0}, {"allowed_types": [""]}],
)
def test_bad_configuration(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        OfflineQueue(tmp_path / "q.db", QueueOptions(**kwargs))
    assert not (tmp_path / "q.db").exists()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_foreign_sqlite_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (id INTEGER)")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(ForeignDatabase, match="not a pigeon edge"):
        OfflineQueue(path)
    assert _digest(path) == before


def test_a_file_that_is_not_sqlite_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"dear diary, " * 1000)
    with pytest.raises(ForeignDatabase):
        OfflineQueue(path)
    assert path.read_bytes() == b"dear diary, " * 1000


def test_a_newer_schema_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    OfflineQueue(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = _digest(path)
    with pytest.raises(SchemaTooNew, match="99"):
        OfflineQueue(path)
    assert _digest(path) == before


def test_open_without_create(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="no such file"):
        OfflineQueue(tmp_path / "missing.db", QueueOptions(create=False))
    assert not (tmp_path / "missing.db").exists()


# A lone surrogate (half of an emoji cut by a slice) has no UTF-8 form: SQLite cannot
# store it, so it is refused at the door with the error of the field it is in.
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("update", "note:1", {"t": "\ud800"}), {}, PayloadNotSerializable, "payload"),
        (("update", "note:1", {"\udfff": 1}), {}, PayloadNotSerializable, "payload"),
        (("update", "note:\ud800", {}), {}, EmptyEntity, "entity"),
        (("update", "note:1", {}), {"endpoint": "/x/\ud800"}, InvalidOperation, "endpoint"),
        (("x\ud800", "note:1", {}), {}, UnknownOperationType, "operation type"),
        (("update", "note:1", {}), {"base_version": "\ud800"}, InvalidOperation, "base_version"),
        (("update", "note:1", {}), {"base_version": 3}, InvalidOperation, "base_version"),
    ],
)
def test_text_with_no_utf8_form_is_refused_naming_the_field(
    tmp_path: Path, args: tuple[Any, ...], kwargs: dict[str, Any], error: type, message: str
) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        with pytest.raises(error, match=f"^{message}"):
            q.enqueue(*args, **kwargs)
        assert q.stats().depth == 0
        assert q.enqueue("update", "note:1", {"t": "\U0001f426"}).payload == {"t": "\U0001f426"}


def _in_flight(q: OfflineQueue) -> str:
    q.enqueue("create", "note:9", {"id": 9})
    [op] = [o for o in q.next_batch() if o.entity == "note:9"]
    return op.id


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q, i: q.mark_failed(i, "x", retry_after="5"), "retry_after"),
        (lambda q, i: q.mark_failed(i, "x", retry_after=True), "retry_after"),
        (lambda q, i: q.mark_failed(i, "x", retry_after=float("inf")), "retry_after"),
        (lambda q, i: q.mark_failed(i, ValueError("boom")), "error"),
        (lambda q, i: q.mark_failed(i, None), "error"),
        (lambda q, i: q.mark_failed(i, "bad \ud800", kind="permanent"), "error"),
        (lambda q, i: q.release(i, retry_after="5"), "retry_after"),
        (lambda q, i: q.set_base_version("note:9", ""), "version"),
        (lambda q, i: q.set_base_version("note:9", object()), "version"),
        (lambda q, i: q.set_base_version("note:9", "\ud800"), "version"),
        (lambda q, i: q.set_base_version("note:\ud800", "v1"), "entity"),
        (lambda q, i: q.mark_delivered_many([(i, None, "")]), "etag"),
        (lambda q, i: q.mark_delivered_many([(i, None, 7)]), "etag"),
        (lambda q, i: q.next_batch(2.5), "n"),
        (lambda q, i: q.next_batch(-1), "n"),
        (lambda q, i: q.next_batch("3"), "n"),
        (lambda q, i: q.operations("bogus"), "unknown operation status 'bogus'"),
        (lambda q, i: q.operations("coalesced"), "no operation is stored as 'coalesced'"),
        (lambda q, i: q.operations("pending", limit=1.5), "limit"),
        (lambda q, i: q.pause("\ud800"), "reason"),
    ],
)
def test_bad_arguments_raise_a_typed_error_and_change_nothing(
    tmp_path: Path, call: Any, message: str
) -> None:
    with OfflineQueue(
        tmp_path / "q.db", QueueOptions(durability="normal"), now=lambda: 1000.0
    ) as q:
        q.enqueue("create", "note:8", {"id": 8})
        op_id = _in_flight(q)  # note:8 was handed out too; note:9 is the one we look at
        before = (q.get(op_id), q.base_version("note:9"), q.stats(), q.paused)
        with pytest.raises(InvalidOperation, match=f"^{message}"):
            call(q, op_id)
        assert (q.get(op_id), q.base_version("note:9"), q.stats(), q.paused) == before


def test_next_batch_of_zero_hands_out_nothing(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        q.enqueue("create", "note:1", {})
        assert q.next_batch(0) == []
        assert q.stats().in_flight == 0


@pytest.mark.parametrize(
    "payload",
    [
        {"a": [1, 2.5, None, True], "t": "é\u2028\U0001f426"},
        ("a", "tuple"),
        "  spaces around  ",
        "\ufeffstarts with a byte order mark",
        -0.0,
        1e300,
        0,
        None,
        [[[]]],
    ],
)
def test_enqueue_returns_the_payload_as_stored(tmp_path: Path, payload: Any) -> None:
    """What enqueue returns is decoded from the stored JSON (a fresh object, tuples as
    lists), exactly as every later read of the operation gives it."""
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        op = q.enqueue("publish", "note:1", payload)
        stored = q.get(op.id).payload
        assert op.payload == stored and type(op.payload) is type(stored)
