"""What the queue stores as an operation's response: the text json.dumps(response,
default=str) gives, compact, whichever way it is written (one delivery, or a reply's run:
its responses as JSON values SQLite writes, or as texts when one holds a NaN), and with a
key that text sealed, bound to the operation, as a BLOB."""

from __future__ import annotations

import datetime
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite.rows import RESPONSE_AD, responses_values
from pigeon.storage.crypto import Cipher, Keyring, generate_key

ODD: list[Any] = [
    {"status": 201, "body": {"title": "caf\u00e9 \u2603", "n": 1.1, "big": 10**30}, "etag": "1"},
    {"body": [1.5e-7, float("inf"), float("nan"), True, None, 'q"uo\\te\n\x00']},
    {"when": datetime.date(2026, 1, 2), 1: "int key", "nested": [[], [{}], {"a": [None]}]},
    ("a", 1),
    "plain text",
    0,
    None,
]
# The same without a NaN or an infinity: a reply's run of these goes as JSON values.
FINITE: list[Any] = [
    {"status": 201, "body": {"title": "caf\u00e9 \u2603", "n": 1.1, "big": 10**30}, "etag": "1"},
    {"body": [1.5e-7, -0.0, 1e300, True, None, 'q"uo\\te\n\x00\ud800\U0001f600']},
    *ODD[2:],
]


def _text(response: Any) -> str:
    return json.dumps(response, default=str, separators=(",", ":"))


def _stored(path: str, op_id: str) -> str | bytes | None:
    with sqlite3.connect(path) as conn:
        (value,) = conn.execute("SELECT response FROM operations WHERE id = ?", (op_id,)).fetchone()
    assert value is None or isinstance(value, str | bytes)
    return value


def _deliver(queue: OfflineQueue, many: bool, responses: list[Any] = ODD) -> list[tuple[str, Any]]:
    ops = [queue.enqueue("create", f"note:{i}", i) for i in range(len(responses))]
    queue.next_batch()
    pairs = [(op.id, response) for op, response in zip(ops, responses, strict=True)]
    if many:
        queue.mark_delivered_many([(op_id, response, None) for op_id, response in pairs])
    else:
        for op_id, response in pairs:
            queue.mark_delivered(op_id, response=response)
    return pairs


@pytest.mark.parametrize("responses", [ODD, FINITE], ids=["with-nan", "finite"])
@pytest.mark.parametrize("many", [False, True])
def test_the_stored_text_is_json_dumps_of_the_response(
    queue: OfflineQueue, many: bool, responses: list[Any]
) -> None:
    for op_id, response in _deliver(queue, many, responses):
        expected = None if response is None else _text(response)
        assert _stored(queue.path, op_id) == expected
        read = queue.get(op_id).response
        assert json.dumps(read, default=str) == json.dumps(json.loads(expected or "null"))


@pytest.mark.parametrize("many", [False, True])
def test_with_a_key_it_is_that_text_sealed_to_its_operation(tmp_path: Path, many: bool) -> None:
    keys = Keyring((("k1", generate_key()),))
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal"), keys=keys) as queue:
        pairs = _deliver(queue, many)
        for op_id, response in pairs:
            stored = _stored(queue.path, op_id)
            if response is None:
                assert stored is None
                continue
            assert isinstance(stored, bytes) and stored.startswith(b"pg1:k1:")
            clear = Cipher(keys).open(stored, *RESPONSE_AD, op_id)
            assert clear == _text(response)
            assert json.dumps(queue.get(op_id).response) == json.dumps(json.loads(clear))


def test_a_run_of_finite_responses_goes_as_json_values_and_one_with_a_nan_as_texts() -> None:
    # The finite case above is the values' statement, the other deliver_all's.
    assert responses_values([("a", response) for response in FINITE]) is not None
    assert responses_values([("a", response) for response in ODD]) is None


def test_a_circular_response_is_refused_and_nothing_is_delivered(queue: OfflineQueue) -> None:
    op = queue.enqueue("create", "note:a", 1)
    queue.next_batch()
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular"):
        queue.mark_delivered_many([(op.id, {"body": circular}, None)])
    assert queue.get(op.id).status is OpStatus.IN_FLIGHT
    queue.mark_delivered_many([(op.id, {"body": "fine"}, None)])  # the encoder is not stuck
    assert queue.get(op.id).response == {"body": "fine"}
