"""Owners of in-flight operations (pigeon.edge.owners): what a queue that is gone left in
flight is sent again, same key, while every queue still open keeps its own.

Real SQLite files and real child processes, killed with SIGKILL: the lock of a killed
process's owner file is released by the kernel, its file stays behind.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.operation import Operation, OpStatus
from pigeon.edge import owners
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite import APPLICATION_ID
from pigeon.exceptions import ConfigurationError
from pigeon.storage.queries import migrations
from tests import processes
from tests.clocks import FakeClock

fcntl = pytest.importorskip("fcntl", reason="owner files need flock")

HOLDER = Path(__file__).with_name("holder_child.py")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "q.db"


def owner_files(path: Path) -> list[str]:
    return sorted(os.listdir(str(path) + owners.SUFFIX))


def kill_holder(path: Path, count: int = 3) -> dict[str, str]:
    """Run holder_child.py on ``path`` until it has ``count`` operations in flight, then
    SIGKILL it. Returns what it took: id -> idempotency key."""
    child = processes.spawn(
        [sys.executable, str(HOLDER), str(path), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert child.stdout is not None
        taken: dict[str, str] = {}
        for line in iter(child.stdout.readline, b"ready\n"):
            assert line, "the holder exited before taking its operations"
            op_id, key = line.decode().split()
            taken[op_id] = key
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert len(taken) == count
    return taken


@contextlib.contextmanager
def alive(path: Path, **options: Any) -> Iterator[tuple[OfflineQueue, Operation]]:
    """Queue A, open throughout, with an operation of its own in flight (``options``:
    QueueOptions' fields besides durability)."""
    with OfflineQueue(path, QueueOptions(durability="normal", **options)) as a:
        a.enqueue("create", "mine:1", {})
        [op] = a.next_batch()
        yield a, op


def in_flight(queue: OfflineQueue, op: Operation) -> bool:
    now = queue.get(op.id)
    return now.status is OpStatus.IN_FLIGHT and now.idempotency_key == op.idempotency_key


@pytest.mark.timeout(60)
def test_a_new_opener_takes_over_what_a_killed_process_left_while_another_lives(
    path: Path,
) -> None:
    with alive(path) as (a, mine):
        taken = kill_holder(path)
        assert {a.get(i).status for i in taken} == {OpStatus.IN_FLIGHT}
        assert len(owner_files(path)) == 2  # A's, and the one the killed process left
        with OfflineQueue(path, QueueOptions(durability="normal")) as new:
            again = new.next_batch()
            assert {op.id: op.idempotency_key for op in again} == taken
            assert all(op.attempts == 0 for op in again)
            assert in_flight(new, mine)  # A's own: A is alive
            assert len(owner_files(path)) == 2  # A's and the new opener's, not the dead one's
        assert in_flight(a, mine)
        a.mark_delivered(mine.id)


@pytest.mark.timeout(60)
def test_a_running_queue_takes_over_what_a_killed_neighbour_left(path: Path) -> None:
    with alive(path, recover_every=0.2) as (a, mine):
        taken = kill_holder(path)
        deadline = time.monotonic() + 10
        again: list[Operation] = []
        while not again:  # the next check is at most recover_every (0.2 s) away
            assert time.monotonic() < deadline, "A never took over the dead neighbour's"
            again = a.next_batch()
            time.sleep(0.02)
        assert {op.id: op.idempotency_key for op in again} == taken
        assert in_flight(a, mine)
        assert len(owner_files(path)) == 1  # A's own; the dead one's removed
        for op in [*again, mine]:
            a.mark_delivered(op.id)
        assert a.stats().delivered == len(taken) + 1


def test_two_queues_of_one_process_never_take_each_others(path: Path) -> None:
    with (
        OfflineQueue(path, QueueOptions(durability="normal", recover_every=0)) as q1,
        OfflineQueue(path, QueueOptions(durability="normal", recover_every=0)) as q2,
    ):
        one = q1.enqueue("create", "note:1", {})
        assert [o.id for o in q1.next_batch()] == [one.id]
        two = q2.enqueue("create", "note:2", {})
        assert [o.id for o in q2.next_batch()] == [two.id]  # a check ran: q1 is alive
        assert q1.next_batch() == [] and q2.next_batch() == []
        with OfflineQueue(path, QueueOptions(durability="normal")) as q3:  # an opener is not alone
            assert q3.next_batch() == []
        assert in_flight(q1, one) and in_flight(q2, two)
        assert len(owner_files(path)) == 2
        q1.close()  # what it left in flight is no one's now
        [again] = q2.next_batch()
        assert (again.id, again.idempotency_key) == (one.id, one.idempotency_key)
        assert in_flight(q2, two)


def test_close_removes_the_owner_file(path: Path) -> None:
    queue = OfflineQueue(path)
    [token] = owner_files(path)
    assert token == "1"  # the first number the new file issued
    with OfflineQueue(path):
        assert owner_files(path) == ["1", "2"]
    assert owner_files(path) == [token]
    queue.close()
    assert owner_files(path) == []
    queue.close()  # twice is harmless


def test_an_opener_sweeps_the_files_of_dead_owners_only(path: Path) -> None:
    OfflineQueue(path).close()
    folder = Path(str(path) + owners.SUFFIX)
    stale = folder / ("a" * 32)  # a process killed with nothing in flight left it
    stale.touch()
    held = folder / ("b" * 32)  # another process's, open: its lock is held
    foreign = folder / "notes.txt"  # not ours to judge
    foreign.touch()
    fd = os.open(held, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with OfflineQueue(path) as queue:
            assert queue.stats().depth == 0
            assert not stale.exists() and held.exists() and foreign.exists()
        with OfflineQueue(path, QueueOptions(recover=False)):  # looking only: sweeps nothing
            stale.touch()
        assert stale.exists()
    finally:
        os.close(fd)


def test_without_an_owner_file_a_queue_falls_back_on_the_side_lock(path: Path) -> None:
    # The owners' folder cannot be made (here a file is in its way; a read-only directory
    # does the same): rows carry no owner and only an opener that is alone recovers them.
    Path(str(path) + owners.SUFFIX).touch()
    with OfflineQueue(path, QueueOptions(recover_every=0)) as first:
        op = first.enqueue("create", "note:1", {})
        first.next_batch()
        with OfflineQueue(path, QueueOptions(recover_every=0)) as second:
            assert second.next_batch() == [] and in_flight(second, op)
    with OfflineQueue(path) as alone:
        [again] = alone.next_batch()
        assert again.idempotency_key == op.idempotency_key


def _schema_4_file(path: Path, op_id: str) -> None:
    """A queue file as the pigeon before owners left it: one operation in flight."""
    conn = sqlite3.connect(path)
    for number, script in migrations("sqlite", "edge")[:4]:
        conn.executescript(script)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("INSERT INTO edge_state (one, node_id) VALUES (1, 'old')")
    conn.execute(
        "INSERT INTO operations (id, idempotency_key, type, entity, payload, created_at,"
        " clock, next_attempt_at, status, head, dispatches)"
        " VALUES (?, 'old-key', 'create', 'note:1', '{}', 1.0, '', 1.0, 'in_flight', 1, 1)",
        (op_id,),
    )
    conn.commit()
    conn.close()


def test_an_old_file_is_upgraded_and_its_ownerless_rows_recovered_as_before(
    path: Path, clock: FakeClock
) -> None:
    _schema_4_file(path, "old-op")
    with OfflineQueue(
        path, QueueOptions(recover_every=0), now=clock
    ) as a:  # alone: recovers as before
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA user_version").fetchone() == (
            len(migrations("sqlite", "edge")),
        )
        [(owner,)] = conn.execute("SELECT owner FROM operations WHERE id = 'old-op'")
        assert owner is None
        [op] = a.next_batch()
        assert (op.id, op.idempotency_key, op.attempts) == ("old-op", "old-key", 0)
        # In flight with no owner again, as a row written before the migration is: while
        # anyone has the file open it may be really in flight, so it is left alone.
        conn.execute("UPDATE operations SET owner = NULL WHERE id = 'old-op'")
        conn.commit()
        conn.close()
        with OfflineQueue(path, QueueOptions(recover_every=0), now=clock) as b:
            assert b.next_batch() == []
        assert a.next_batch() == [] and in_flight(a, op)
    with OfflineQueue(path, now=clock) as alone:
        [again] = alone.next_batch()
        assert (again.id, again.idempotency_key) == ("old-op", "old-key")


def test_running_checks_are_throttled(path: Path) -> None:
    t = FakeClock(100.0)
    numbers = itertools.count(1)
    mine = owners.Owners(
        str(path), issue=lambda _: next(numbers), every=5, recover=True, monotonic=t
    )
    looking = owners.Owners(
        str(path), issue=lambda _: next(numbers), every=5, recover=False, monotonic=t
    )
    try:
        assert not mine.due()  # open has just recovered
        t.advance(5)
        assert mine.due() and not mine.due()
        t.advance(4.9)
        assert not mine.due()
        t.advance(0.1)
        assert mine.due()
        t.advance(1e9)
        assert not looking.due()
    finally:
        mine.close()
        looking.close()


@pytest.mark.parametrize("bad", [-1, math.nan, "5", True, None])
def test_recover_every_must_be_seconds(path: Path, bad: object) -> None:
    with pytest.raises(ConfigurationError, match="recover_every"):
        OfflineQueue(path, QueueOptions(recover_every=bad))  # type: ignore[arg-type]
    assert not path.exists()  # refused before anything was opened


def issued(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        [(n,)] = conn.execute("SELECT owners_issued FROM edge_state")
        return int(n)
    finally:
        conn.close()


def owner_of(path: Path, op_id: str) -> str | None:
    conn = sqlite3.connect(path)
    try:
        [(owner,)] = conn.execute("SELECT owner FROM operations WHERE id = ?", (op_id,))
        return owner  # type: ignore[no-any-return]
    finally:
        conn.close()


def test_the_file_counts_its_tokens_and_never_issues_one_twice(path: Path) -> None:
    # Short tokens (written on every row taken) must not repeat in a file: a new owner
    # with a dead one's token would keep the dead one's rows in flight as its own.
    with OfflineQueue(path, QueueOptions(durability="normal")) as q1, OfflineQueue(path) as q2:
        assert owner_files(path) == ["1", "2"]
        op = q1.enqueue("create", "note:1", {})
        assert [o.id for o in q1.next_batch()] == [op.id]
        assert owner_of(path, op.id) == "1"
        assert q2.next_batch() == []
    assert owner_files(path) == []  # both closed: their names are free, not reusable
    assert issued(path) == 2
    with OfflineQueue(path, QueueOptions(durability="normal")) as q3:
        assert owner_files(path) == ["3"]
        [again] = q3.next_batch()  # q1 is gone: its operation leaves again, same key
        assert (again.id, again.idempotency_key) == (op.id, op.idempotency_key)
        assert owner_of(path, op.id) == "3"
    assert issued(path) == 3


def test_a_name_already_in_the_folder_is_skipped(path: Path) -> None:
    with OfflineQueue(path):  # token 1, alive
        # The queue file goes back (as if restored from a backup): its count says 0
        # while the folder already has 1 (held) and 2 (a dead owner's, left behind).
        conn = sqlite3.connect(path)
        conn.execute("UPDATE edge_state SET owners_issued = 0")
        conn.commit()
        conn.close()
        (Path(str(path) + owners.SUFFIX) / "2").touch()
        with OfflineQueue(path) as b:
            assert owner_files(path) == ["1", "3"]  # 2 swept by b's open: unlocked
            assert issued(path) == 3
            b.enqueue("create", "note:1", {})
            [op] = b.next_batch()
            assert owner_of(path, op.id) == "3"


def test_a_name_made_by_another_opener_meanwhile_is_skipped(tmp_path: Path) -> None:
    folder = str(tmp_path / "q.db-owners")
    floors: list[int] = []

    def issue(floor: int) -> int:
        # Another opener makes the next name between our look at the folder and our
        # O_EXCL create, as two openers of a file restored from a backup might.
        floors.append(floor)
        number = max(floor, 6) + 1
        if len(floors) == 1:
            (Path(folder) / str(number)).touch()
        return number

    Path(folder).mkdir()
    (Path(folder) / "5").touch()
    (Path(folder) / "notes.txt").touch()
    claimed = owners._claim(folder, issue)
    assert claimed is not None
    token, fd = claimed
    try:
        # Above the greatest number in the folder, then past the one made meanwhile.
        assert (token, floors) == ("8", [5, 7])
        assert not owners.dead(folder, token)  # ours, locked: alive
    finally:
        os.close(fd)


def test_a_running_queue_recovers_rows_of_a_dead_owner_of_the_previous_version(
    path: Path,
) -> None:
    # After an upgrade, a 32-hex token (uuid4, what the previous version made) can only be
    # a dead process's: its rows are still taken over while the file is in use, not left
    # for an opener that is alone. A token that is not ours at all stays in flight.
    old, foreign = "c" * 32, "not-ours"
    with alive(path, recover_every=0) as (a, mine), OfflineQueue(path) as b:
        stale = Path(str(path) + owners.SUFFIX) / old
        stale.touch()  # left by the killed old process: nobody holds its lock
        ops = {o: a.enqueue("create", f"old:{o}", {}) for o in (old, foreign)}
        conn = sqlite3.connect(path)
        conn.executemany(
            "UPDATE operations SET status = 'in_flight', dispatches = 1, owner = ? WHERE id = ?",
            [(o, op.id) for o, op in ops.items()],
        )
        conn.commit()
        conn.close()
        [again] = a.next_batch()  # the running check (recover_every=0), not an open
        assert (again.id, again.idempotency_key) == (ops[old].id, ops[old].idempotency_key)
        assert not stale.exists()
        assert in_flight(a, ops[foreign]) and owner_of(path, ops[foreign].id) == foreign
        assert in_flight(a, mine) and b.next_batch() == []
