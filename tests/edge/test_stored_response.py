"""What the queue stores as an operation's response: the text json.dumps(response,
default=str) would give, whichever way it is written (one delivery, or a reply's run)."""

from __future__ import annotations

import datetime
import json
import sqlite3
from typing import Any

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.queue import OfflineQueue

ODD: list[Any] = [
    {"status": 201, "body": {"title": "caf\u00e9 \u2603", "n": 1.1, "big": 10**30}, "etag": "1"},
    {"body": [1.5e-7, float("inf"), float("nan"), True, None], "when": datetime.date(2026, 1, 2)},
    ("a", 1),
    "plain text",
    0,
]


def _stored(queue: OfflineQueue, op_id: str) -> str:
    with sqlite3.connect(queue.path) as conn:
        (text,) = conn.execute("SELECT response FROM operations WHERE id = ?", (op_id,)).fetchone()
    assert isinstance(text, str)
    return text


@pytest.mark.parametrize("many", [False, True])
def test_the_stored_text_is_json_dumps_of_the_response(queue: OfflineQueue, many: bool) -> None:
    ops = [queue.enqueue("create", f"note:{i}", i) for i in range(len(ODD))]
    queue.next_batch()
    if many:
        queue.mark_delivered_many(
            [(op.id, response, None) for op, response in zip(ops, ODD, strict=True)]
        )
    else:
        for op, response in zip(ops, ODD, strict=True):
            queue.mark_delivered(op.id, response=response)
    for op, response in zip(ops, ODD, strict=True):
        assert _stored(queue, op.id) == json.dumps(response, default=str)


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
