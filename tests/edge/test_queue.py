"""OfflineQueue: storing, ordering, handing out, failing, repairing."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from pigeon.core.operation import OpStatus, OpType
from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import InvalidOperation, InvalidState, NotFound, StoreUnavailable
from tests.clocks import FakeClock


def test_enqueue_stores_every_field_with_two_distinct_uuids(queue: OfflineQueue) -> None:
    op = queue.enqueue("create", "note:42", {"title": "hello"}, base_version="v0")
    assert (op.type, op.entity, op.payload) == ("create", "note:42", {"title": "hello"})
    assert uuid.UUID(op.id) != uuid.UUID(op.idempotency_key)
    assert (op.method, op.endpoint, op.base_version) == ("POST", "/notes", "v0")
    assert op.status is OpStatus.PENDING and op.attempts == 0 and op.clock
    assert queue.get(op.id) == op


def test_ids_and_keys_are_time_ordered(queue: OfflineQueue) -> None:
    # The server's claims are keyed by the idempotency key: keys in time order put a
    # batch's claims at the end of the index, not one page each (pigeon.core.ids).
    ops = []
    for i in range(4):
        ops.append(queue.enqueue("create", f"note:{i}", {}))
        time.sleep(0.002)  # the next one a millisecond later at least
    for made in ([op.id for op in ops], [op.idempotency_key for op in ops]):
        assert all(uuid.UUID(text).version == 7 for text in made)
        assert made == sorted(made)


def test_default_routing_and_explicit_routes(queue: OfflineQueue) -> None:
    assert queue.enqueue(OpType.UPDATE, "note:7", {}).endpoint == "/notes/7"
    delete = queue.enqueue("delete", "task:a b", None)
    assert (delete.method, delete.endpoint) == ("DELETE", "/tasks/a%20b")
    custom = queue.enqueue("publish", "note:7", {}, endpoint="/notes/7/publish", method="post")
    assert (custom.method, custom.endpoint) == ("POST", "/notes/7/publish")
    assert queue.enqueue("archive", "inbox", {}).endpoint is None


def test_clocks_increase_in_queue_order(queue: OfflineQueue) -> None:
    ops = [queue.enqueue("update", f"note:{i % 3}", i) for i in range(3)]
    ops += [queue.enqueue("create", f"doc:{i}", i) for i in range(5)]
    stored = queue.pending
    assert [o.seq for o in stored] == sorted(o.seq for o in stored)
    assert [o.clock for o in stored] == sorted(o.clock for o in stored)


def test_next_batch_takes_one_head_per_entity_in_queue_order(queue: OfflineQueue) -> None:
    a1 = queue.enqueue("create", "note:a", 1)
    b1 = queue.enqueue("create", "note:b", 1)
    queue.enqueue("publish", "note:a", 2)  # app-defined: never coalesced
    c1 = queue.enqueue("create", "note:c", 1)
    batch = queue.next_batch(10)
    assert [o.id for o in batch] == [a1.id, b1.id, c1.id]
    assert all(o.status is OpStatus.IN_FLIGHT for o in batch)
    assert queue.next_batch(10) == []  # the tail of note:a waits for its head
    queue.mark_delivered(a1.id, response={"ok": True})
    [a2] = queue.next_batch(10)
    assert (a2.entity, a2.type) == ("note:a", "publish")
    assert queue.get(a1.id).status is OpStatus.DELIVERED
    assert queue.get(a1.id).response == {"ok": True}


def test_next_batch_respects_its_limit_and_keeps_the_rest(queue: OfflineQueue) -> None:
    for i in range(5):
        queue.enqueue("create", f"note:{i}", i)
    assert [o.entity for o in queue.next_batch(2)] == ["note:0", "note:1"]
    assert [o.entity for o in queue.next_batch(2)] == ["note:2", "note:3"]
    assert queue.next_batch(0) == []


def test_transient_failure_backs_off_with_the_same_key(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    op = queue.enqueue("create", "note:1", {})
    queue.enqueue("update", "note:1", {"later": True})  # folded: the create is unsent
    queue.enqueue("update", "note:2", {})
    first = queue.next_batch()
    assert [o.entity for o in first] == ["note:1", "note:2"]
    queue.enqueue("update", "note:1", {"behind": True})  # head in flight: appended
    failed = queue.mark_failed(op.id, "503 from server", retry_after=30)
    assert failed.status is OpStatus.PENDING and failed.attempts == 1
    assert failed.next_attempt_at == clock() + 30
    assert failed.idempotency_key == op.idempotency_key
    assert failed.history[-1]["error"] == "503 from server"
    assert queue.next_batch() == []  # head backing off, its tail waits behind it
    assert queue.next_due_at() == clock() + 30
    assert queue.stats().entities_blocked == 1
    clock.advance(30)
    [again] = queue.next_batch()
    assert again.id == op.id and again.idempotency_key == op.idempotency_key


def test_exhausted_and_permanent_failures_are_dead_letters_that_block_only_their_entity(
    tmp_path: Path, clock: FakeClock
) -> None:
    policy = RetryPolicy(base=1, cap=1, max_attempts=2)
    with OfflineQueue(tmp_path / "q.db", QueueOptions(retry_policy=policy), now=clock) as queue:
        op = queue.enqueue("update", "note:1", 1)
        queue.next_batch()
        tail = queue.enqueue("update", "note:1", 2)
        queue.mark_failed(op.id, "timeout")
        clock.advance(1)
        queue.next_batch()
        dead = queue.mark_failed(op.id, "timeout again")
        assert dead.status is OpStatus.DEAD and dead.attempts == 2
        assert [h["error"] for h in dead.history] == ["timeout", "timeout again"]
        other = queue.enqueue("update", "note:2", 1)
        assert [o.id for o in queue.next_batch()] == [other.id]  # note:1's tail is held
        assert queue.get(tail.id).held and not queue.get(other.id).held
        perm = queue.enqueue("create", "note:9", {})
        queue.next_batch()
        assert queue.mark_failed(perm.id, "422", kind="permanent").status is OpStatus.DEAD
        assert [o.id for o in queue.dead_letters()] == [op.id, perm.id]
        stats = queue.stats()
        assert (stats.dead, stats.held, stats.entities_blocked) == (2, 1, 2)


def test_max_age_dead_letters_old_operations(tmp_path: Path, clock: FakeClock) -> None:
    policy = RetryPolicy(max_age=60)
    with OfflineQueue(tmp_path / "q.db", QueueOptions(retry_policy=policy), now=clock) as queue:
        op = queue.enqueue("update", "note:1", 1)
        queue.next_batch()
        clock.advance(61)
        assert queue.mark_failed(op.id, "still down").status is OpStatus.DEAD


def test_retry_dead_goes_back_in_its_place_ahead_of_what_was_held(queue: OfflineQueue) -> None:
    op = queue.enqueue("update", "note:1", 1)
    queue.next_batch()
    queue.mark_failed(op.id, "400", kind="permanent")
    later = queue.enqueue("update", "note:1", 2)  # held behind the dead head: never sent
    assert queue.next_batch() == [] and queue.get(later.id).held
    back = queue.retry_dead(op.id)
    assert back.status is OpStatus.PENDING and back.attempts == 0 and not back.held
    assert back.idempotency_key == op.idempotency_key and back.seq == op.seq < later.seq
    assert [o.id for o in queue.pending] == [op.id, later.id]
    assert not queue.get(later.id).held  # waiting behind a live head, not a dead one
    assert [o.id for o in queue.next_batch()] == [op.id]
    with pytest.raises(InvalidState, match="in_flight"):
        queue.retry_dead(op.id)
    queue.mark_delivered(op.id)
    assert [o.id for o in queue.next_batch()] == [later.id]


def test_discarding_a_dead_head_releases_its_entity_or_drops_the_tail_too(
    queue: OfflineQueue,
) -> None:
    for entity in ("note:1", "note:2"):
        dead = queue.enqueue("create", entity, {"v": 0})
        queue.next_batch()
        queue.mark_failed(dead.id, "422", kind="permanent")
        queue.enqueue("update", entity, {"v": 1}, method="PATCH")
        queue.enqueue("update", entity, {"v": 2}, method="PATCH")
    one, two = (o.id for o in queue.dead_letters())
    assert queue.stats().held == 4 and queue.next_batch() == []
    assert queue.discard(one) == []
    released = queue.next_batch()
    assert [(o.entity, o.payload) for o in released] == [("note:1", {"v": 1})]
    dropped = queue.discard(two, with_tail=True)
    assert [o.payload for o in dropped] == [{"v": 1}, {"v": 2}]
    assert [o.entity for o in queue.pending] == ["note:1", "note:1"]
    assert queue.stats().held == 0 and queue.dead_letters() == []


def test_a_dead_or_retried_head_is_never_coalesced_into(queue: OfflineQueue) -> None:
    op = queue.enqueue("update", "note:1", 1)
    queue.next_batch()
    queue.mark_failed(op.id, "400", kind="permanent")
    held = queue.enqueue("update", "note:1", 2)  # queues behind the dead head, held
    assert held.id != op.id and queue.get(op.id).payload == 1
    folded = queue.enqueue("update", "note:1", 3)  # into the held one: never sent
    assert folded.id == held.id and queue.get(held.id).payload == 3
    queue.retry_dead(op.id)
    assert queue.get(op.id).payload == 1 and [o.id for o in queue.pending] == [op.id, held.id]


def test_conflict_holds_the_entity_until_resolved_or_discarded(queue: OfflineQueue) -> None:
    op = queue.enqueue("update", "note:1", 1)
    queue.next_batch()
    held = queue.mark_failed(op.id, "412 precondition failed", kind="conflict")
    assert held.status is OpStatus.CONFLICT
    queue.enqueue("update", "note:1", 2)
    other = queue.enqueue("update", "note:2", 1)
    assert [o.id for o in queue.next_batch()] == [other.id]
    stats = queue.stats()
    assert (stats.conflicts, stats.entities_blocked, stats.depth) == (1, 1, 3)
    queue.resolve_conflict(op.id)
    assert [o.id for o in queue.next_batch()] == [op.id]
    queue.mark_failed(op.id, "412 again", kind="conflict")
    queue.discard(op.id)
    [tail] = queue.next_batch()
    assert tail.payload == 2
    with pytest.raises(NotFound):
        queue.get(op.id)


def test_release_returns_without_spending_an_attempt(queue: OfflineQueue) -> None:
    op = queue.enqueue("update", "note:1", 1)
    queue.next_batch()
    queue.release(op.id)
    again = queue.get(op.id)
    assert again.status is OpStatus.PENDING and again.attempts == 0
    assert [o.id for o in queue.next_batch()] == [op.id]
    with pytest.raises(InvalidState):
        queue.cancel(op.id)


def test_cancel_only_what_was_never_sent(queue: OfflineQueue) -> None:
    sent = queue.enqueue("update", "note:1", 1)
    queue.next_batch()
    waiting = queue.enqueue("update", "note:1", 2)
    queue.cancel(waiting.id)
    assert [o.id for o in queue.pending] == [sent.id]
    with pytest.raises(InvalidState, match="cannot cancel"):
        queue.cancel(sent.id)
    with pytest.raises(NotFound):
        queue.cancel(waiting.id)


def test_mark_calls_check_state(queue: OfflineQueue) -> None:
    op = queue.enqueue("update", "note:1", 1)
    with pytest.raises(InvalidState, match="pending"):
        queue.mark_delivered(op.id)
    with pytest.raises(InvalidState):
        queue.mark_failed(op.id, "x")
    with pytest.raises(InvalidState):
        queue.release(op.id)
    queue.next_batch()
    with pytest.raises(InvalidOperation, match="kind"):
        queue.mark_failed(op.id, "x", kind="sometimes")  # type: ignore[arg-type]
    queue.mark_delivered(op.id)
    queue.mark_delivered(op.id)  # a repeated 2xx is harmless
    with pytest.raises(NotFound, match="nope"):
        queue.mark_delivered("nope")


def test_pause_is_persisted_and_stops_handing_out(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, now=clock) as queue:
        queue.enqueue("update", "note:1", 1)
        queue.pause("authorisation needed (401)")
        assert queue.next_batch() == []
    with OfflineQueue(path, now=clock) as queue:
        assert queue.paused == "authorisation needed (401)"
        assert queue.stats().paused == "authorisation needed (401)"
        queue.resume()
        assert queue.paused is None and len(queue.next_batch()) == 1


def test_base_versions(queue: OfflineQueue) -> None:
    assert queue.base_version("note:1") is None
    queue.set_base_version("note:1", "v3")
    queue.set_base_version("note:1", "v4")
    assert queue.base_version("note:1") == "v4"
    queue.set_base_version("note:1", None)
    assert queue.base_version("note:1") is None


def test_stats_and_purge(queue: OfflineQueue, clock: FakeClock) -> None:
    assert queue.stats().depth == 0 and queue.stats().oldest_age is None
    assert queue.next_due_at() is None
    a = queue.enqueue("create", "note:1", 1)
    clock.advance(10)
    queue.enqueue("create", "note:2", 1)
    assert queue.next_due_at() == a.created_at
    stats = queue.stats()
    assert (stats.depth, stats.oldest_age, stats.in_flight) == (2, 10.0, 0)
    queue.next_batch(1)
    assert queue.stats().in_flight == 1
    queue.mark_delivered(a.id)
    clock.advance(100)
    assert queue.stats().delivered == 1 and queue.stats().oldest_age == 100.0
    assert queue.purge_delivered(older_than=200) == 0
    assert queue.purge_delivered(older_than=50) == 1
    assert queue.stats().delivered == 0


def test_in_flight_operations_are_sent_again_after_a_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "q.db"
    queue = OfflineQueue(path, now=clock)
    op = queue.enqueue("create", "note:1", {"a": 1})
    queue.next_batch()
    queue.close()  # as if the process had died with the request on the wire
    with OfflineQueue(path, now=clock) as reopened:
        [again] = reopened.next_batch()
        assert (again.id, again.idempotency_key, again.attempts) == (
            op.id,
            op.idempotency_key,
            0,
        )
        # it may have reached the server: later edits must not be folded into it
        reopened.release(again.id)
        newer = reopened.enqueue("update", "note:1", {"a": 2})
        assert newer.id != op.id


@pytest.mark.parametrize("first_recovers", [True, False], ids=["recovering", "not-recovering"])
def test_an_open_queue_keeps_its_in_flight_operations_when_another_opens(
    tmp_path: Path, clock: FakeClock, first_recovers: bool
) -> None:
    # Whether or not it recovered when it opened (the CLI does not), an open queue holds
    # the side lock that tells a later opener it is not alone.
    path = tmp_path / "q.db"
    OfflineQueue(path, now=clock).close()
    with OfflineQueue(path, QueueOptions(recover=first_recovers), now=clock) as first:
        first.enqueue("create", "note:1", {})
        [op] = first.next_batch()
        with OfflineQueue(path, now=clock) as second:
            assert second.get(op.id).status is OpStatus.IN_FLIGHT
            assert second.next_batch() == []
        first.mark_delivered(op.id)


def test_clock_never_goes_back_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    late = FakeClock(2_000_000.0)
    with OfflineQueue(path, now=late) as queue:
        before = queue.enqueue("create", "note:1", {}).clock
    with OfflineQueue(path, now=FakeClock(1_000.0)) as queue:  # the device clock jumped back
        assert queue.enqueue("create", "note:2", {}).clock > before


def test_batch_groups_calls_into_one_transaction(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, now=clock) as queue:
        for i in range(5):
            queue.enqueue("create", f"note:{i}", i)
        ops = queue.next_batch()
        with queue.batch():
            for op in ops[:3]:
                queue.mark_delivered(op.id)
            extra = queue.enqueue("update", "note:0", "after")  # joins the transaction
            other = sqlite3.connect(path)  # nothing is visible before the commit
            seen = other.execute("SELECT count(*) FROM operations WHERE status = 'delivered'")
            assert seen.fetchone() == (0,)
            other.close()
        assert queue.stats().delivered == 3 and queue.get(extra.id).payload == "after"
        with pytest.raises(RuntimeError), queue.batch():
            queue.mark_delivered(ops[3].id)
            raise RuntimeError("the app crashed while handling the response")
        assert queue.get(ops[3].id).status is OpStatus.IN_FLIGHT  # rolled back
        with queue.batch():  # a refused call inside a batch leaves the rest intact
            queue.mark_delivered(ops[3].id)
            with pytest.raises(NotFound):
                queue.mark_delivered("nope")
        assert queue.get(ops[3].id).status is OpStatus.DELIVERED


def test_oldest_age_is_the_oldest_head_whatever_its_place_in_the_queue(
    queue: OfflineQueue, clock: FakeClock
) -> None:
    old = queue.enqueue("create", "note:old", {"id": "old"})  # made at t0
    queue.next_batch()
    queue.mark_failed(old.id, "400", kind="permanent")
    clock.advance(4000)
    queue.enqueue("create", "note:new", {"id": "new"})
    queue.retry_dead(old.id)  # back at the tail, still made at t0
    clock.advance(10)
    assert queue.stats().oldest_age == 4010.0
    queue.next_batch()  # in flight, and then held for a conflict: still the oldest
    assert queue.stats().oldest_age == 4010.0
    queue.mark_failed(old.id, "412", kind="conflict")
    assert queue.stats().oldest_age == 4010.0
    clock.advance(-3000)  # the device clock goes back: a later operation made "earlier"
    queue.enqueue("create", "note:back", {"id": "back"})
    queue.discard(old.id)
    assert queue.stats().oldest_age == 0.0  # note:back, made just now
    clock.advance(5)
    assert queue.stats().oldest_age == 5.0


def test_oldest_age_reads_the_heads_index_not_the_table(queue: OfflineQueue) -> None:
    tx = queue._store.read()
    plan = tx.conn.execute("EXPLAIN QUERY PLAN " + tx.queries["oldest_head"]).fetchall()
    details = " ".join(row["detail"] for row in plan)
    assert "USING INDEX operations_heads" in details and "SCAN operations" not in details, details


@pytest.mark.parametrize("name", ["recover_in_flight", "recover_owner", "in_flight_owners"])
def test_recovery_reads_the_heads_index_not_the_table(queue: OfflineQueue, name: str) -> None:
    # Every open recovers; a scan there grew with the delivered history kept for a week.
    tx = queue._store.read()
    plan = tx.conn.execute(
        "EXPLAIN QUERY PLAN " + tx.queries[name], {"now": 0, "owner": "1", "me": "1"}
    ).fetchall()
    details = " ".join(row["detail"] for row in plan)
    assert "USING INDEX operations_heads" in details and "SCAN operations" not in details, details


def test_a_closed_queue_refuses_to_be_used_and_keeps_nothing_open(tmp_path: Path) -> None:
    # close() let go of the file and of its owner lock (another process may now take
    # over its in-flight operations); using the queue after that quietly opened a new
    # connection and went on, as if it still held them.
    path = tmp_path / "q.db"
    queue = OfflineQueue(path)
    queue.enqueue("create", "note:1", {"t": "x"})
    queue.close()
    for use in (
        lambda: queue.enqueue("create", "note:2", {"t": "y"}),
        lambda: queue.next_batch(10),
        lambda: queue.stats(),
    ):
        with pytest.raises(StoreUnavailable, match="closed"):
            use()
    with OfflineQueue(path) as again:  # the file itself is fine
        assert [op.entity for op in again.pending] == ["note:1"]
