"""Rows as Operations: the hundred rows a next_batch hands out are built positionally
(`rows.operations`), and must come out as the one-row path (`rows.to_operation`) reads them."""

from __future__ import annotations

import dataclasses
import sqlite3

from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite.rows import OPERATION_FIELDS


def test_the_positional_fields_are_operations_own_in_its_order() -> None:
    names = tuple(field.name for field in dataclasses.fields(Operation))
    assert names[: len(OPERATION_FIELDS)] == OPERATION_FIELDS
    assert set(names) - set(OPERATION_FIELDS) == {"held"}  # the listings' alone


def test_a_batch_hands_out_what_get_reads(queue: OfflineQueue) -> None:
    first = queue.enqueue("create", "note:a", {"title": "caf\u00e9", "n": [1, 2.5, None]})
    queue.enqueue("update", "note:b", [1, "two"], endpoint="/b", method="PATCH")
    queue.enqueue("delete", "note:c", None, base_version="v7")
    queue.mark_failed(queue.next_batch(1)[0].id, "boom", retry_after=0.0)
    handed = queue.next_batch()
    assert [op.status for op in handed] == [OpStatus.IN_FLIGHT] * 3
    assert handed[0].id == first.id and handed[0].attempts == 1
    assert handed[0].history and handed[0].history[0]["error"] == "boom"
    for op in handed:
        assert op == queue.get(op.id)


def test_a_payload_stored_with_whitespace_reads_as_json_loads_reads_it(
    queue: OfflineQueue,
) -> None:
    op = queue.enqueue("create", "note:a", {"a": 1})
    with sqlite3.connect(queue.path) as conn:  # as an import might have written it
        conn.execute("UPDATE operations SET payload = ? WHERE id = ?", (' {"a": 1}\n', op.id))
    [handed] = queue.next_batch()
    assert handed.payload == {"a": 1}
