"""The edge queue opened with a key: payloads and the server's responses are sealed in the
file (bound to their operation), everything reads back in clear through the queue, and a
queue opened without the key says which key it needs instead of returning garbage."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pigeon.edge.queue import OfflineQueue
from pigeon.storage.crypto import CiphertextInvalid, KeyMissing, Keyring, generate_key
from pigeon.storage.sqlite import connect

CANARY = "edge-canary-51d0e2"
KEYS = Keyring((("e1", generate_key()),))


def _raw(path: Path) -> bytes:
    return b"".join(
        Path(f"{path}{suffix}").read_bytes()
        for suffix in ("", "-wal", "-shm")
        if Path(f"{path}{suffix}").exists()
    )


def test_payloads_and_responses_are_sealed_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, keys=KEYS) as queue:
        queue.enqueue("create", "note:1", {"body": CANARY})
        queue.enqueue("update", "note:1", {"body": CANARY + "-2"})  # folded into the create
        with queue.batch():  # several heads in one statement
            queue.enqueue("create", "note:2", {"body": CANARY})
            queue.enqueue("create", "note:3", {"body": CANARY})
        sent = queue.next_batch(10)
        assert [op.payload["body"] for op in sent] == [CANARY + "-2", CANARY, CANARY]
        queue.mark_delivered(sent[0].id, response={"echo": CANARY})
        queue.mark_delivered_many([(sent[1].id, {"echo": CANARY}, '"1"')])
        queue.release(sent[2].id)
        assert queue.get(sent[0].id).response == {"echo": CANARY}
        assert queue.get(sent[1].id).response == {"echo": CANARY}
        assert [op.payload["body"] for op in queue.pending] == [CANARY]
    assert CANARY.encode() not in _raw(path)
    with OfflineQueue(path, keys=KEYS) as queue:
        assert queue.operations(None)[0].payload == {"body": CANARY + "-2"}


def test_without_a_key_the_file_holds_the_payload_in_clear(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path) as queue:
        queue.enqueue("create", "note:1", {"body": CANARY})
    assert CANARY.encode() in _raw(path)


def test_opened_without_its_key_the_queue_names_the_key_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, keys=KEYS) as queue:
        queue.enqueue("create", "note:1", {"body": CANARY})
    for keys in (None, Keyring((("other", generate_key()),))):
        with OfflineQueue(path, keys=keys) as queue, pytest.raises(KeyMissing, match="'e1'"):
            queue.pending  # noqa: B018


def test_a_payload_moved_to_another_operation_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, keys=KEYS) as queue:
        queue.enqueue("create", "note:1", {"body": "mine"})
        queue.enqueue("create", "note:2", {"body": "theirs"})
    conn = connect(path)
    try:
        conn.execute(
            "UPDATE operations SET payload = (SELECT payload FROM operations WHERE entity = "
            "'note:1') WHERE entity = 'note:2'"
        )
    finally:
        conn.close()
    with OfflineQueue(path, keys=KEYS) as queue, pytest.raises(CiphertextInvalid):
        queue.pending  # noqa: B018


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=8))
def test_any_payload_round_trips_through_a_sealed_queue(tmp_path: Path, payload: object) -> None:
    path = tmp_path / f"{uuid.uuid4().hex}.db"
    with OfflineQueue(path, keys=KEYS) as queue:
        op = queue.enqueue("create", "e:1", payload)
        assert queue.get(op.id).payload == payload
        assert queue.next_batch(1)[0].payload == payload
