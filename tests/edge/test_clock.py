"""The queue's clock across processes and restarts: the file is its floor.

Every opener of a queue file stamps with the file's node id, so the server's
last-write-wins compares their stamps as one node's: a later operation must carry a
greater stamp, whichever process made it, and whatever the device clock did.
"""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from pigeon.core.clock import HLCTimestamp
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from tests import processes
from tests.clocks import FakeClock

# Opens the queue, then enqueues one operation per line read on stdin and answers with
# its stamp, until stdin closes. It keeps the queue (and its clock) open throughout.
CHILD = """
import sys
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
queue = OfflineQueue(sys.argv[1], QueueOptions(durability="normal"))
for line in sys.stdin:
    op = queue.enqueue("publish", "note:1", {"by": sys.argv[2], "n": int(line)})
    print(op.clock, flush=True)
queue.close()
"""


def _stamps_in_seq_order(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT clock FROM operations ORDER BY seq")]
    finally:
        conn.close()


def _floor(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT clock FROM edge_state").fetchone()[0])
    finally:
        conn.close()


def _increasing(stamps: list[str]) -> bool:
    decoded = [HLCTimestamp.decode(s) for s in stamps]
    return all(a < b for a, b in itertools.pairwise(decoded))


def test_two_processes_enqueueing_alternately_stamp_in_seq_order(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    # A stamp from a device clock ten minutes ahead (corrected since): both processes must
    # go on from it, and they used to each count on from it on their own.
    with OfflineQueue(path, now=lambda: time.time() + 600) as ahead:
        ahead.enqueue("publish", "note:0", {})
    children = [
        processes.spawn(
            [sys.executable, "-c", CHILD, str(path), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:
        for n in range(20):
            child = children[n % 2]
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{n}\n")
            child.stdin.flush()
            assert child.stdout.readline().strip()  # enqueued (committed) before the next
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
        for child in children:
            assert child.wait(timeout=30) == 0
    stamps = _stamps_in_seq_order(path)
    assert len(stamps) == 21
    assert _increasing(stamps), stamps
    assert _floor(path) == max(stamps)


def test_two_queues_on_one_file_in_one_process(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000.0)
    with (
        OfflineQueue(tmp_path / "q.db", now=clock) as one,
        OfflineQueue(tmp_path / "q.db", now=clock) as two,
    ):
        for i in range(3):
            one.enqueue("publish", "note:1", i)
        two.enqueue("publish", "note:1", "made last")
        with two.batch():  # an enqueue joining a batch's transaction reads the floor too
            two.enqueue("publish", "note:1", "in a batch")
        one.enqueue("publish", "note:1", "after the batch")
        assert one.stamp() > HLCTimestamp.decode(_floor(tmp_path / "q.db"))
    assert _increasing(_stamps_in_seq_order(tmp_path / "q.db"))


def test_a_restart_after_many_retried_dead_letters_stays_ahead(tmp_path: Path) -> None:
    """Retried dead letters rejoin the tail with their old stamps: the newest real stamp
    is then far from the newest rows, and a device clock that went back must not matter."""
    path = tmp_path / "q.db"
    clock = FakeClock(1000.0)
    first = OfflineQueue(path, QueueOptions(durability="normal"), now=clock)
    dead = [first.enqueue("create", f"note:{i}", {"id": i}).id for i in range(150)]
    for op in first.next_batch(200):
        first.mark_failed(op.id, "400", kind="permanent")
    clock.now = 2000.0
    newest = first.enqueue("update", "note:x", {"v": 1})
    first.next_batch()
    first.mark_delivered(newest.id)
    for op_id in dead:
        first.retry_dead(op_id)
    clock.now = 1500.0  # the process dies (no close()); the device clock went back
    with OfflineQueue(path, QueueOptions(durability="normal"), now=clock) as second:
        later = second.enqueue("update", "note:x", {"v": 2})
        assert HLCTimestamp.decode(later.clock) > HLCTimestamp.decode(newest.clock)
        assert second.stamp() > HLCTimestamp.decode(later.clock)
    first.close()


def test_the_floor_holds_every_stamp_stored(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    clock = FakeClock(5000.0)
    with OfflineQueue(
        path, QueueOptions(durability="normal", keep_delivered=None), now=clock
    ) as queue:
        queue.enqueue("create", "note:1", {"v": 0})
        queue.enqueue("update", "note:1", {"v": 1})  # folded: the row takes the new stamp
        assert _floor(path) == max(_stamps_in_seq_order(path))
        queue.enqueue("create", "note:2", {})
        clock.advance(1)
        gone = queue.enqueue("delete", "note:2", None)  # both vanish, and its stamp
        assert _floor(path) == gone.clock
        [op] = queue.next_batch()
        queue.mark_delivered(op.id)
        clock.advance(10)
        assert queue.purge_delivered(older_than=0) == 1
        clock.now = 100.0  # back in time
        after = queue.enqueue("create", "note:3", {})
        assert HLCTimestamp.decode(after.clock) > HLCTimestamp.decode(gone.clock)


def test_an_older_file_takes_its_greatest_stored_stamp_as_the_floor(tmp_path: Path) -> None:
    """Files of schema 3 kept the state row's clock only on folds, purges and close()."""
    path = tmp_path / "q.db"
    with OfflineQueue(path, now=lambda: 9000.0) as queue:
        stored = queue.enqueue("publish", "note:1", {}).clock
    conn = sqlite3.connect(path)
    conn.execute("UPDATE edge_state SET clock = ''")
    conn.execute("ALTER TABLE operations DROP COLUMN owner")  # what schema 5 added
    conn.execute("ALTER TABLE edge_state DROP COLUMN owners_issued")  # and schema 6
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with OfflineQueue(path, now=lambda: 10.0) as queue:
        assert _floor(path) == stored
        later = queue.enqueue("publish", "note:1", {})
        assert HLCTimestamp.decode(later.clock) > HLCTimestamp.decode(stored)


def test_stamps_stay_unique_and_ordered_under_threads(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with OfflineQueue(path, QueueOptions(durability="normal"), now=lambda: 42.0) as queue:
        lent: list[HLCTimestamp] = []

        def work(t: int) -> None:
            for i in range(50):
                queue.enqueue("publish", f"note:{t}", i)
                lent.append(queue.stamp())

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stamps = _stamps_in_seq_order(path)
        assert _increasing(stamps)
        every = stamps + [s.encode() for s in lent]
        assert len(set(every)) == len(every) == 400
