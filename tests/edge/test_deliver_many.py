"""OfflineQueue.mark_delivered_many: a whole reply settled at once, as if one by one."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import InvalidState, NotFound
from tests.clocks import FakeClock


def test_delivers_sets_versions_and_promotes_the_next_heads(queue: OfflineQueue) -> None:
    a1 = queue.enqueue("create", "note:a", 1)
    queue.enqueue("publish", "note:a", 2)  # never coalesced: waits behind a1
    b1 = queue.enqueue("create", "note:b", 1)
    assert [o.id for o in queue.next_batch()] == [a1.id, b1.id]
    queue.mark_delivered_many([(a1.id, {"status": 201}, "v1"), (b1.id, None, None)])
    assert queue.get(a1.id).status is OpStatus.DELIVERED
    assert queue.get(a1.id).response == {"status": 201}
    assert queue.base_version("note:a") == "v1" and queue.base_version("note:b") is None
    [a2] = queue.next_batch()
    assert (a2.entity, a2.type) == ("note:a", "publish")
    queue.mark_delivered_many([(a1.id, {"status": 200}, None)])  # a repeat is harmless
    assert queue.get(a1.id).response == {"status": 201}


def test_all_or_nothing_and_the_refusal_names_the_operation(queue: OfflineQueue) -> None:
    sent = queue.enqueue("create", "note:a", 1)
    queue.next_batch()
    waiting = queue.enqueue("create", "note:b", 1)
    with pytest.raises(InvalidState, match="pending"):
        queue.mark_delivered_many([(sent.id, None, "v1"), (waiting.id, None, None)])
    with pytest.raises(NotFound, match="nope"):
        queue.mark_delivered_many([(sent.id, None, "v1"), ("nope", None, None)])
    assert queue.get(sent.id).status is OpStatus.IN_FLIGHT
    assert queue.base_version("note:a") is None
    with queue.batch():  # inside a batch, a refused call leaves the rest of it intact
        queue.mark_delivered_many([(sent.id, None, "v1")])
        with pytest.raises(NotFound):
            queue.mark_delivered_many([("nope", None, None)])
    assert queue.get(sent.id).status is OpStatus.DELIVERED


def _state(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        ops = conn.execute("SELECT entity, status, head, response FROM operations ORDER BY seq")
        versions = conn.execute("SELECT entity, version FROM base_versions ORDER BY entity")
        return [*ops.fetchall(), *versions.fetchall()]
    finally:
        conn.close()


# Each step: the entity (of 3) an operation is made on, and whether the reply is 2xx.
steps = st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=25)


@settings(max_examples=30, deadline=None)
@given(steps=steps, rounds=st.integers(1, 4))
def test_same_state_as_one_by_one(steps: list[tuple[int, bool]], rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "one.db", Path(tmp) / "many.db"]
        for path, bulk in zip(paths, (False, True), strict=True):
            with OfflineQueue(path, QueueOptions(durability="normal"), now=FakeClock()) as queue:
                verdict = {}
                for entity, ok in steps:
                    op = queue.enqueue("publish", f"note:{entity}", ok)
                    verdict[op.id] = ok
                for r in range(rounds):
                    ops = queue.next_batch()
                    good = [(op.id, {"r": r}, f"v{r}") for op in ops if verdict[op.id]]
                    if bulk:
                        queue.mark_delivered_many(good)
                    else:
                        for op_id, response, etag in good:
                            queue.set_base_version(queue.get(op_id).entity, etag)
                            queue.mark_delivered(op_id, response=response)
                    for op in ops:
                        if not verdict[op.id]:
                            queue.release(op.id)
        assert _state(paths[0]) == _state(paths[1])


@pytest.mark.parametrize("n", [1, 40])
def test_a_whole_reply_costs_the_same_few_statements(tmp_path: Path, n: int) -> None:
    """Three statements however long the reply (a fourth for versions): each statement is
    a trip through the interpreter, so one per operation would set the delivery pace."""
    with OfflineQueue(
        tmp_path / "q.db", QueueOptions(durability="normal", coalesce=False)
    ) as queue:
        for i in range(n):
            queue.enqueue("update", f"note:{i}", 1)
            queue.enqueue("update", f"note:{i}", 2)  # waits behind the first: promoted
        ops = queue.next_batch(n)
        statements: list[str] = []
        queue._store.db.connection().set_trace_callback(statements.append)
        # Each one twice in the same reply: harmless, and the first response stays.
        replies = [(op.id, {"i": i}, None) for i, op in enumerate(ops)]
        queue.mark_delivered_many(replies + [(op_id, {"again": 1}, None) for op_id, *_ in replies])
        queue._store.db.connection().set_trace_callback(None)
        written = [s for s in statements if "UPDATE operations" in s or "INSERT" in s]
        assert len(written) == 2, written  # deliver_all, promote_heads
        assert queue.get(ops[-1].id).response == {"i": n - 1}
        assert all(queue.get(op.id).status is OpStatus.DELIVERED for op in ops)
        second = queue.next_batch(2 * n)
        assert [(o.entity, o.payload) for o in second] == [(o.entity, 2) for o in ops]


def test_a_late_repeat_of_an_old_reply_keeps_the_newer_base_version(
    queue: OfflineQueue,
) -> None:
    a1 = queue.enqueue("create", "note:a", {"id": "a"})
    queue.next_batch()
    queue.mark_delivered_many([(a1.id, None, "v1")])
    a2 = queue.enqueue("update", "note:a", {"x": 2}, base_version="v1")
    queue.next_batch()
    queue.mark_delivered_many([(a2.id, None, "v2")])
    queue.mark_delivered_many([(a1.id, None, "v1")])  # a1's reply, again, late
    assert queue.base_version("note:a") == "v2"
    # and mixed into a reply that does deliver something
    b = queue.enqueue("create", "note:b", {"id": "b"})
    queue.next_batch()
    queue.mark_delivered_many([(a1.id, None, "v1"), (b.id, None, "vb")])
    assert (queue.base_version("note:a"), queue.base_version("note:b")) == ("v2", "vb")


def test_an_id_given_twice_keeps_its_first_response_and_its_first_etag(
    queue: OfflineQueue,
) -> None:
    b = queue.enqueue("create", "note:b", {"id": "b"})
    queue.next_batch()
    queue.mark_delivered_many([(b.id, {"r": 1}, "vb1"), (b.id, {"r": 2}, "vb-dup")])
    assert queue.get(b.id).response == {"r": 1}
    assert queue.base_version("note:b") == "vb1"
