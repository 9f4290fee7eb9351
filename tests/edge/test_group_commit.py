"""Group commit: concurrent enqueues share transactions, each returns once durable;
two processes on one file."""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from pigeon.edge.commit import CommitBatcher, More
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from tests import processes


def test_waiting_writers_share_one_transaction(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db") as queue:
        queue.enqueue("create", "warmup:0", {})
        before = queue.commits
        results: dict[int, str] = {}
        # Hold the writer so the first enqueue leads and blocks; the others queue behind it.
        with queue._store.db.writer:

            def enqueue(i: int) -> None:
                results[i] = queue.enqueue("create", f"note:{i}", {"i": i}).id

            threads = [threading.Thread(target=enqueue, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 10
            while len(queue._group._queue) < 7 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert len(queue._group._queue) == 7
        for t in threads:
            t.join(10)
        assert sorted(results) == list(range(8))
        # The blocked leader writes its own item, then takes the seven that queued while
        # it waited into the same transaction before committing (late joiners).
        assert queue.commits - before == 1
        stored = {op.id for op in queue.pending}
        assert set(results.values()) <= stored


def test_one_item_failing_inside_the_transaction_fails_alone() -> None:
    committed: list[list[int]] = []

    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        committed.append([*items, *more()])
        return [ValueError(f"bad {i}") if i == 3 else i * 10 for i in committed[-1]]

    group: CommitBatcher[int, int] = CommitBatcher(commit)
    outcomes: dict[int, object] = {}
    gate = threading.Barrier(6)

    def run(i: int) -> None:
        gate.wait()
        try:
            outcomes[i] = group.submit(lambda: i)
        except ValueError as exc:
            outcomes[i] = str(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert outcomes == {0: 0, 1: 10, 2: 20, 3: "bad 3", 4: 40, 5: 50}
    assert sorted(i for batch in committed for i in batch) == list(range(6))


def test_a_failing_transaction_fails_its_whole_batch_and_the_next_one_runs() -> None:
    calls = 0

    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("disk full")
        return list(items)

    group: CommitBatcher[int, int] = CommitBatcher(commit)
    with pytest.raises(OSError, match="disk full"):
        group.submit(lambda: 1)
    assert group.submit(lambda: 2) == 2


class _Interrupt(Exception):
    """Raised by the test's SIGINT handler (a KeyboardInterrupt would stop pytest)."""


def _raise_interrupt(signum: int, frame: object) -> None:
    raise _Interrupt


def test_an_interrupted_waiter_settles_its_item_and_hands_on_before_raising() -> None:
    writing, go = threading.Event(), threading.Event()
    committed: list[int] = []

    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        if list(items) == [0]:
            writing.set()
            assert go.wait(10)
        committed.extend(items)  # no more(): the waiting caller is chosen to lead next
        return list(items)

    group: CommitBatcher[int, int] = CommitBatcher(commit)
    threading.Thread(target=lambda: group.submit(lambda: 0), daemon=True).start()
    assert writing.wait(10)

    def interrupt_the_waiter_then_let_the_leader_go() -> None:
        deadline = time.monotonic() + 10
        while not group._queue and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)  # the main thread is in its wait
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        time.sleep(0.2)
        go.set()

    previous = signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        threading.Thread(target=interrupt_the_waiter_then_let_the_leader_go).start()
        with pytest.raises(_Interrupt):
            group.submit(lambda: 1)  # the main thread waits: signals interrupt its wait
    finally:
        signal.signal(signal.SIGINT, previous)
    assert committed == [0, 1]  # its item was settled (it led) before the interrupt rose
    later: dict[str, int] = {}
    after = threading.Thread(target=lambda: later.update(r=group.submit(lambda: 2)), daemon=True)
    after.start()
    after.join(5)
    assert later == {"r": 2}, "a caller after the interrupted one must not wait for nobody"


def test_late_joiners_enter_the_transaction_before_it_commits() -> None:
    group: CommitBatcher[int, int] = CommitBatcher(lambda items, more: [])
    writing, go = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        taken = list(items)
        if taken == [0]:
            writing.set()
            assert go.wait(10)  # others queue while the leader "writes"
        while extra := more():
            taken.extend(extra)
        batches.append(taken)
        return [i * 10 for i in taken]

    group._commit = commit
    results: dict[int, int] = {}
    first = threading.Thread(target=lambda: results.update({0: group.submit(lambda: 0)}))
    first.start()
    assert writing.wait(10)
    others = [
        threading.Thread(target=lambda i=i: results.update({i: group.submit(lambda: i)}))
        for i in (1, 2, 3)
    ]
    for t in others:
        t.start()
    deadline = time.monotonic() + 10
    while len(group._queue) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    go.set()
    for t in (first, *others):
        t.join(10)
    assert results == {0: 0, 1: 10, 2: 20, 3: 30}
    assert len(batches) == 1 and batches[0][0] == 0 and sorted(batches[0]) == [0, 1, 2, 3]


def test_a_failing_item_in_a_shared_transaction_fails_alone_in_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pigeon.edge.queue as queue_module

    with OfflineQueue(tmp_path / "q.db") as queue:
        taken = queue.enqueue("create", "note:0", {}).id
        real_uuid7 = queue_module.uuid7
        # A duplicate id breaks the UNIQUE index: the one item fails, its batch-mates not.
        monkeypatch.setattr(
            queue_module,
            "uuid7",
            lambda: taken if threading.current_thread().name == "dup" else real_uuid7(),
        )
        outcomes: dict[str, object] = {}

        def enqueue(name: str) -> None:
            try:
                outcomes[name] = queue.enqueue("create", f"note:{name}", {}).id
            except sqlite3.IntegrityError as exc:
                outcomes[name] = exc

        with queue._store.db.writer:
            threads = [
                threading.Thread(target=enqueue, args=(n,), name=n) for n in ["a", "dup", "b", "c"]
            ]
            threads[0].start()  # "a" leads, and waits for the writer's lock
            deadline = time.monotonic() + 10
            while not queue._group._leading and time.monotonic() < deadline:
                time.sleep(0.001)
            for t in threads[1:]:
                t.start()
            while len(queue._group._queue) < 3 and time.monotonic() < deadline:
                time.sleep(0.001)
        for t in threads:
            t.join(10)
        assert isinstance(outcomes.pop("dup"), sqlite3.IntegrityError)
        assert sorted(o.entity for o in queue.pending) == ["note:0", "note:a", "note:b", "note:c"]
        assert set(outcomes.values()) <= {o.id for o in queue.pending}


def test_many_threads_lose_nothing_and_keep_per_thread_order(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(coalesce=False)) as queue:

        def work(t: int) -> None:
            for i in range(40):
                queue.enqueue("update", f"thread:{t}", i)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        ops = queue.pending
        assert len(ops) == 320
        for t in range(8):
            assert [o.payload for o in ops if o.entity == f"thread:{t}"] == list(range(40))
        assert queue.commits <= 320


CHILD = """
import sys
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
with OfflineQueue(sys.argv[1], QueueOptions(coalesce=False)) as q:
    for i in range(200):
        q.enqueue("update", f"{sys.argv[2]}:{i % 5}", i)
        if i % 10 == 0:
            for op in q.next_batch(3):
                q.mark_delivered(op.id)
"""


def test_two_processes_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    OfflineQueue(path).close()
    children = [
        processes.spawn([sys.executable, "-c", CHILD, str(path), name]) for name in ("a", "b")
    ]
    for child in children:
        assert child.wait(60) == 0
    with OfflineQueue(path) as queue:
        ops = queue.operations(limit=10_000)
        assert len(ops) == 400
        assert len({o.id for o in ops}) == 400 and len({o.idempotency_key for o in ops}) == 400
        for entity in {o.entity for o in ops}:
            mine = [o for o in ops if o.entity == entity]
            assert [o.payload for o in mine] == sorted(o.payload for o in mine)
            delivered = [o.status == "delivered" for o in mine]
            assert delivered == sorted(delivered, reverse=True)  # a prefix, never out of order


def test_a_lone_caller_commits_in_hand_without_a_ticket(monkeypatch: pytest.MonkeyPatch) -> None:
    import pigeon.edge.commit as commit_module

    def no_ticket(item: object) -> None:
        raise AssertionError("a lone caller must not make a ticket")

    monkeypatch.setattr(commit_module, "_Ticket", no_ticket)
    seen: list[list[int]] = []

    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        seen.append([*items, *more()])
        return [i * 10 for i in seen[-1]]

    group: CommitBatcher[int, int] = CommitBatcher(commit)
    assert [group.submit(lambda i=i: i) for i in range(3)] == [0, 10, 20]
    assert seen == [[0], [1], [2]]
    assert (group.transactions, group.items) == (3, 3)
    assert not group._leading and not group._queue


def test_a_lone_leaders_error_is_its_own_and_the_next_caller_leads() -> None:
    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        return [ValueError("odd") if i % 2 else i for i in items]

    group: CommitBatcher[int, int] = CommitBatcher(commit)
    with pytest.raises(ValueError, match="odd"):
        group.submit(lambda: 1)
    assert not group._leading
    assert group.submit(lambda: 2) == 2


def test_a_follower_arriving_during_a_lone_commit_is_committed_before_it_returns() -> None:
    inside, go = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def commit(items: Sequence[int], more: More[int]) -> list[int | BaseException]:
        taken = list(items)
        if taken == [0]:
            inside.set()
            assert go.wait(10)
        batches.append(taken)  # no more(): the follower must wait for the next leader
        return [i * 10 for i in taken]

    group: CommitBatcher[int, int] = CommitBatcher(commit)
    results: dict[int, int] = {}
    lone = threading.Thread(target=lambda: results.update({0: group.submit(lambda: 0)}))
    lone.start()
    assert inside.wait(10)
    follower = threading.Thread(target=lambda: results.update({1: group.submit(lambda: 1)}))
    follower.start()
    deadline = time.monotonic() + 10
    while len(group._queue) < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(group._queue) == 1
    go.set()
    lone.join(10)
    follower.join(10)
    assert results == {0: 0, 1: 10}
    assert batches == [[0], [1]]  # handed over: the follower led its own commit
    assert not group._leading and not group._queue
