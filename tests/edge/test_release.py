"""release(): back to pending without spending an attempt; with retry_after (409 "key in
progress") the server holds the key, so the operation stays sent and waits."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite import APPLICATION_ID
from pigeon.exceptions import InvalidOperation, InvalidState
from pigeon.storage.queries import migrations
from tests.clocks import FakeClock


def test_plain_release_is_due_at_once_and_stays_foldable(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    op = queue.enqueue("create", "note:1", {"v": 1})
    queue.next_batch()
    released = queue.release(op.id)
    assert released == queue.get(op.id)
    assert (released.status, released.attempts, released.next_attempt_at) == (
        OpStatus.PENDING,
        0,
        clock(),
    )
    # Never reached the server: a later edit may still fold into it, and it may be withdrawn.
    folded = queue.enqueue("update", "note:1", {"v": 2})
    assert folded.id == op.id and folded.payload == {"v": 2}
    queue.cancel(op.id)
    assert queue.pending == []


def test_release_with_retry_after_waits_without_spending_an_attempt(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    op = queue.enqueue("create", "note:1", {"v": 1})
    other = queue.enqueue("create", "note:2", {})
    queue.next_batch()
    released = queue.release(op.id, retry_after=30)
    assert released == queue.get(op.id)
    assert released.status is OpStatus.PENDING and released.attempts == 0
    assert released.next_attempt_at == clock() + 30
    assert released.idempotency_key == op.idempotency_key
    queue.release(other.id)
    assert [o.id for o in queue.next_batch()] == [other.id]  # op is not due yet
    assert queue.next_due_at() == clock() + 30  # the scheduler's timer sees it
    clock.advance(30)
    [again] = queue.next_batch()
    assert (again.id, again.attempts, again.idempotency_key) == (op.id, 0, op.idempotency_key)


def test_release_after_key_in_progress_keeps_the_operation_sent(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    op = queue.enqueue("create", "note:1", {"v": 1})
    queue.next_batch()
    queue.release(op.id, retry_after=5)
    # The server may finish it under this key: folding a new payload into it would make
    # the resend a different request under the same key (422), and cancelling would lie.
    later = queue.enqueue("update", "note:1", {"v": 2})
    assert later.id != op.id
    assert queue.get(op.id).payload == {"v": 1}
    with pytest.raises(InvalidState, match="already sent"):
        queue.cancel(op.id)
    # A late 2xx for the key that was in progress still counts.
    queue.mark_delivered(op.id)
    assert queue.get(op.id).status is OpStatus.DELIVERED


def test_release_with_no_named_delay_uses_the_first_backoff(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    op = queue.enqueue("create", "note:1", {})
    queue.next_batch()
    released = queue.release(op.id, retry_after=None)
    assert released.next_attempt_at == clock() + queue.retry_policy.base
    assert released.attempts == 0
    assert queue.enqueue("update", "note:1", {"v": 2}).id != op.id


def test_a_negative_delay_means_now(queue: OfflineQueue, clock: FakeClock) -> None:
    op = queue.enqueue("create", "note:1", {})
    queue.next_batch()
    assert queue.release(op.id, retry_after=-3).next_attempt_at == clock()


@pytest.mark.parametrize("bad", [math.nan, math.inf, "5", True])
def test_bad_retry_after_is_refused_and_changes_nothing(queue: OfflineQueue, bad: object) -> None:
    op = queue.enqueue("create", "note:1", {})
    queue.next_batch()
    with pytest.raises(InvalidOperation, match="retry_after"):
        queue.release(op.id, retry_after=bad)  # type: ignore[arg-type]
    assert queue.get(op.id).status is OpStatus.IN_FLIGHT


def test_only_in_flight_operations_are_released(queue: OfflineQueue) -> None:
    op = queue.enqueue("create", "note:1", {})
    with pytest.raises(InvalidState, match="cannot release"):
        queue.release(op.id, retry_after=1)


def test_a_waiting_key_does_not_hide_a_fresh_operation_from_the_timer(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    held = queue.enqueue("create", "note:1", {})
    queue.next_batch()
    queue.release(held.id, retry_after=30)
    assert queue.next_due_at() == clock() + 30
    fresh = queue.enqueue("create", "note:2", {})
    assert queue.next_due_at() == fresh.created_at  # due now, not in 30 s
    assert [o.id for o in queue.next_batch()] == [fresh.id]


def test_a_version_1_file_is_migrated_to_the_new_timer_index(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "q.db"
    conn = sqlite3.connect(path)
    (number, script), *_ = migrations("sqlite", "edge")
    assert number == 1
    conn.executescript(script)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    with OfflineQueue(path, now=clock) as queue:
        op = queue.enqueue("create", "note:1", {})
        queue.next_batch()
        queue.release(op.id, retry_after=10)
        assert queue.next_due_at() == clock() + 10
    sql = (
        sqlite3.connect(path)
        .execute("SELECT sql FROM sqlite_master WHERE name = 'operations_backoff'")
        .fetchone()[0]
    )
    assert "dispatches > 0" in sql
