"""The delivery cycle's statements: next_batch is one UPDATE, mark_delivered one UPDATE
unless the entity has a next operation to promote to head."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue


def _heads(path: Path) -> dict[str, list[int]]:
    conn = sqlite3.connect(path)
    try:
        heads: dict[str, list[int]] = {}
        for entity, head in conn.execute(
            "SELECT entity, head FROM operations"
            " WHERE status IN ('pending', 'in_flight', 'conflict') ORDER BY seq"
        ):
            heads.setdefault(entity, []).append(head)
        return heads
    finally:
        conn.close()


def _writes(queue: OfflineQueue) -> list[str]:
    statements: list[str] = []
    queue._store.db.connection().set_trace_callback(statements.append)
    return statements


def test_next_batch_is_one_statement_and_in_queue_order(tmp_path: Path) -> None:
    with OfflineQueue(
        tmp_path / "q.db", QueueOptions(durability="normal", coalesce=False)
    ) as queue:
        made = [queue.enqueue("update", f"note:{i % 7}", i) for i in range(20)]
        statements = _writes(queue)
        batch = queue.next_batch(5)
        updates = [s for s in statements if "UPDATE operations" in s]
        assert len(updates) == 1
        assert [o.id for o in batch] == [o.id for o in made[:5]]
        assert [o.seq for o in batch] == sorted(o.seq for o in batch)
        assert all(o.status == "in_flight" and o.history == [] for o in batch)
        assert batch[0].payload == 0 and batch[0].idempotency_key == made[0].idempotency_key


def test_delivering_promotes_the_next_operation_of_the_entity(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, QueueOptions(durability="normal", coalesce=False)) as queue:
        a1 = queue.enqueue("update", "note:a", 1)
        a2 = queue.enqueue("update", "note:a", 2)
        a3 = queue.enqueue("update", "note:a", 3)
        b1 = queue.enqueue("update", "note:b", 1)
        assert _heads(path) == {"note:a": [1, 0, 0], "note:b": [1]}
        assert [o.id for o in queue.next_batch(10)] == [a1.id, b1.id]
        statements = _writes(queue)
        queue.mark_delivered(b1.id)  # nothing behind it: one statement
        assert len([s for s in statements if "UPDATE operations" in s]) == 1
        queue.mark_delivered(a1.id)  # a2 becomes the head: a second statement
        assert len([s for s in statements if "UPDATE operations" in s]) == 3
        assert _heads(path) == {"note:a": [1, 0]}
        assert [o.id for o in queue.next_batch(10)] == [a2.id]
        queue.release(a2.id, retry_after=0)  # pending, still head, the server may have it
        with queue.batch():
            queue.mark_delivered(a2.id)
            queue.mark_delivered(a2.id)  # repeated: harmless
        assert _heads(path) == {"note:a": [1]}
        assert [o.id for o in queue.next_batch(10)] == [a3.id]
