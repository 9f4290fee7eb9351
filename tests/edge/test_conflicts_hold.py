"""ConflictStore.hold and reconcile: one held record per conflict-held operation."""

from __future__ import annotations

from pathlib import Path

from pigeon.core.operation import OpStatus
from pigeon.edge.conflicts import NO_RESOLVER, ConflictStore
from pigeon.edge.queue import OfflineQueue


def held_op(queue: OfflineQueue, entity: str = "note:1") -> str:
    op = queue.enqueue("update", entity, {"body": "mine"}, base_version="1")
    [sent] = queue.next_batch()
    queue.mark_failed(sent.id, "HTTP 412: base version is stale", kind="conflict")
    return op.id


def test_hold_records_an_operation_once_and_a_reply_replaces_an_unknown_remote(
    tmp_path: Path,
) -> None:
    with OfflineQueue(tmp_path / "q.db") as queue:
        store = ConflictStore(queue)
        op = queue.get(held_op(queue))
        assert store.reconcile() == 1 and store.reconcile() == 0
        [unknown] = store.records("held")
        assert unknown.strategy == NO_RESOLVER and unknown.remote is None
        assert unknown.local == {"body": "mine"}
        # The engine's record of the reply comes after: it replaces the one knowing nothing.
        known = store.hold(op, strategy="user", remote={"body": "theirs"}, remote_version="2")
        assert store.get(unknown.id).resolution == "replaced"
        assert [r.id for r in store.records("held")] == [known]
        # A second hold of the same operation keeps the first record.
        assert store.hold(op, strategy="user", remote={"body": "other"}) == known
        assert store.hold(op, strategy=NO_RESOLVER) == known
        assert [r.id for r in store.records("held")] == [known]


def test_reconcile_closes_records_of_operations_no_longer_held(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db") as queue:
        store = ConflictStore(queue)
        discarded, released = held_op(queue, "note:1"), held_op(queue, "note:2")
        assert store.reconcile() == 2
        queue.discard(discarded)
        queue.resolve_conflict(released)
        assert queue.get(released).status is OpStatus.PENDING
        assert store.reconcile() == 2
        assert store.records("held") == []
        assert {r.resolution for r in store.records()} == {"gone"}
        assert queue.stats().conflicts == 0
