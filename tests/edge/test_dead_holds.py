"""A dead operation keeps its place: it stays its entity's head, so the operations made
after it are held, however they reach the file (one enqueue, a group commit's run, a
file written by an older pigeon)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.queue_store import NewOp


def _new(n: int, entity: str) -> NewOp:
    return NewOp(
        id=f"00000000-0000-7000-8000-{n:012d}",
        idempotency_key=f"key-{n}",
        type="update",
        entity=entity,
        payload=f'{{"n":{n}}}',
        endpoint=f"/x/{entity}",
        method="PATCH",
        created_at=1000.0 + n,
        base_version=None,
    )


def _kill(queue: OfflineQueue, entity: str) -> str:
    op = queue.enqueue("create", entity, {"id": entity})
    [sent] = [o for o in queue.next_batch() if o.entity == entity]
    assert sent.id == op.id
    queue.mark_failed(op.id, "422", kind="permanent")
    return op.id


def test_a_group_commits_run_queues_behind_a_dead_head(queue: OfflineQueue) -> None:
    """``append_run`` writes operations on fresh entities as heads with one statement: an
    entity whose only operation is dead is not fresh."""
    _kill(queue, "note:dead")
    built = queue.store.append([_new(1, "note:fresh"), _new(2, "note:dead")], list)
    fresh, held = (b() for b in built if not isinstance(b, BaseException))
    assert [o.id for o in queue.next_batch()] == [fresh.id]
    assert queue.get(held.id).held and queue.stats().held == 1


def test_a_delete_never_cancels_a_dead_create(queue: OfflineQueue) -> None:
    dead = _kill(queue, "note:1")
    gone = queue.enqueue("delete", "note:1", None)
    assert gone.status is OpStatus.PENDING and gone.id != dead  # queued behind, held
    assert queue.get(dead).status is OpStatus.DEAD and queue.get(gone.id).held


def _as_schema_6(path: Path, in_flight: str) -> None:
    """What a pigeon before schema 7 left: a dead letter gave its head up to the next
    operation of its entity (``in_flight``: one it had sent meanwhile), and the index of
    live operations left the dead out."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP INDEX operations_queued")
        conn.execute(
            "CREATE INDEX operations_live ON operations (entity, seq)"
            " WHERE status IN ('pending', 'in_flight', 'conflict')"
        )
        conn.execute("UPDATE operations SET head = 0 WHERE status = 'dead'")
        conn.execute(
            "UPDATE operations SET head = 1 WHERE seq IN (SELECT min(seq) FROM operations"
            " WHERE status IN ('pending', 'in_flight', 'conflict') GROUP BY entity)"
        )
        conn.execute("UPDATE operations SET status = 'in_flight' WHERE id = ?", (in_flight,))
        conn.execute("PRAGMA user_version = 6")
    conn.close()


def test_an_older_file_holds_what_waits_behind_its_dead_letters(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path) as queue:
        dead = {e: _kill(queue, e) for e in ("note:pending", "note:flying")}
        waiting = queue.enqueue("update", "note:pending", {"v": 2})
        flying = queue.enqueue("update", "note:flying", {"v": 2})
        after = queue.enqueue("update", "note:flying", {"v": 3}, method="PATCH")
    _as_schema_6(path, in_flight=flying.id)
    with OfflineQueue(path, QueueOptions(recover=False)) as queue:
        assert queue.get(waiting.id).held  # pending behind a dead letter: held again
        assert not queue.get(after.id).held  # behind an operation the server may have
        assert queue.next_batch() == []  # which stays in flight
        queue.mark_delivered(flying.id)
        assert queue.get(after.id).held  # then the dead letter is the head again
        queue.retry_dead(dead["note:flying"])
        assert [o.id for o in queue.next_batch()] == [dead["note:flying"]]
        assert queue.stats().held == 1  # note:pending's update, still behind its dead one
