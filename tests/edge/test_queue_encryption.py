"""The edge queue opened with a key: payloads and the server's responses are sealed in the
file (bound to their operation), everything reads back in clear through the queue, and a
queue opened without the key says which key it needs instead of returning garbage."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite.rows import PAYLOAD_AD, RESPONSE_AD
from pigeon.storage.crypto import Cipher, CiphertextInvalid, KeyMissing, Keyring, generate_key
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


READS: dict[str, Callable[[OfflineQueue, str], object]] = {
    "pending": lambda queue, op_id: queue.pending,
    "next_batch": lambda queue, op_id: queue.next_batch(10),
    "operations": lambda queue, op_id: queue.operations(None),
    "get": lambda queue, op_id: queue.get(op_id),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_opened_without_its_key_every_read_names_the_key_it_needs(
    tmp_path: Path, read: Callable[[OfflineQueue, str], object]
) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, keys=KEYS) as queue:
        op = queue.enqueue("create", "note:1", {"body": CANARY})
    for keys in (None, Keyring((("other", generate_key()),))):
        with OfflineQueue(path, keys=keys) as queue, pytest.raises(KeyMissing, match="'e1'"):
            read(queue, op.id)
    with OfflineQueue(path, keys=KEYS) as queue:  # nothing was marked on the way
        assert [o.payload for o in queue.next_batch(10)] == [{"body": CANARY}]


def test_values_sealed_as_text_by_the_release_before_still_open(tmp_path: Path) -> None:
    # The queue seals its columns as BLOBs; a file filled before kept base64 texts.
    path = tmp_path / "q.db"
    with OfflineQueue(path, keys=KEYS) as queue:
        ops = [queue.enqueue("create", f"note:{i}", {"body": i}) for i in range(3)]
        sent = queue.next_batch(10)
        queue.mark_delivered_many([(o.id, {"echo": o.payload["body"]}, None) for o in sent])
        ops.append(queue.enqueue("create", "note:9", {"body": 9}))
    conn = connect(path)
    try:
        for op in ops:
            row = conn.execute("SELECT payload, response FROM operations WHERE id = ?", (op.id,))
            payload, response = row.fetchone().values()
            assert isinstance(payload, bytes)
            text = Cipher(KEYS).seal(Cipher(KEYS).open(payload, *PAYLOAD_AD, op.id),
                                     *PAYLOAD_AD, op.id)  # fmt: skip
            again = None if response is None else Cipher(KEYS).seal(
                Cipher(KEYS).open(response, *RESPONSE_AD, op.id), *RESPONSE_AD, op.id)  # fmt: skip
            conn.execute("UPDATE operations SET payload = ?, response = ? WHERE id = ?",
                         (text, again, op.id))  # fmt: skip
    finally:
        conn.close()
    with OfflineQueue(path, keys=KEYS) as queue:
        assert [queue.get(o.id).response for o in ops[:3]] == [{"echo": i} for i in range(3)]
        assert [o.payload for o in queue.next_batch(10)] == [{"body": 9}]


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
