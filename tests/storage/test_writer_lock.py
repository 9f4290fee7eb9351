"""The write lock of a SQLite file (`pigeon.storage.writer_lock`): pigeon's processes on
one file hand the write over as soon as a commit is done, where SQLite's busy handler
slept on in steps of up to 100 ms; a deadline bounds the wait, and a wait given up never
keeps the lock from another process; a closed store leaves no lock taken and no thread
waiting."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.exceptions import JobTimeout
from pigeon.storage import deadline, files, writer_lock
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase
from tests import processes

HOLD = 0.3  # past it, SQLite's busy handler sleeps 100 ms at a time
ROUNDS = 5

# Holds a write transaction for HOLD seconds on each line read, then says when it let go.
HOLDER = f"""
import sys, time
from pigeon.storage.server import open_server_db
db = open_server_db(sys.argv[1])
for line in sys.stdin:
    with db.transaction() as tx:
        tx.sql("DELETE FROM pigeon_jobs")
        print("holding", flush=True)
        time.sleep({HOLD})
    print(time.time(), flush=True)
db.close()
"""


@pytest.fixture
def holder(sqlite_file: SQLiteDatabase) -> Iterator[subprocess.Popen[str]]:
    proc = processes.spawn(
        [sys.executable, "-c", HOLDER, sqlite_file.path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def _hold(holder: subprocess.Popen[str]) -> None:
    """The other process takes the write lock (returns once it holds it)."""
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "holding"


def _let_go(holder: subprocess.Popen[str]) -> float:
    """When the other process let go of the write lock (returns once it has)."""
    assert holder.stdout is not None
    return float(holder.stdout.readline())


def _give_up(db: SQLiteDatabase) -> None:
    """A write that waits for the other process's lock and gives up at its deadline."""
    with pytest.raises(JobTimeout), deadline.waits_until(time.monotonic() + 0.05):
        db.run_in_transaction(lambda tx: None)


def test_the_write_passes_to_another_process_as_soon_as_it_commits(
    sqlite_file: SQLiteDatabase, holder: subprocess.Popen[str]
) -> None:
    lags = []
    for _ in range(ROUNDS):
        _hold(holder)
        with sqlite_file.transaction() as tx:
            began = time.time()
            tx.sql("DELETE FROM pigeon_jobs")
        lags.append(began - _let_go(holder))
    # Through SQLite's busy handler alone: ~28 ms each (its 100 ms sleep from 228 ms on).
    assert statistics.median(lags) < 0.012, lags


def test_a_deadline_ends_the_wait_for_another_process(
    sqlite_file: SQLiteDatabase, holder: subprocess.Popen[str]
) -> None:
    _hold(holder)
    begun = time.monotonic()
    with pytest.raises(JobTimeout), deadline.waits_until(begun + 0.1):
        sqlite_file.run_in_transaction(lambda tx: None)
    assert time.monotonic() - begun < HOLD
    _let_go(holder)  # as usual
    with sqlite_file.transaction() as tx:  # and nothing was left taken here
        tx.sql("DELETE FROM pigeon_jobs")


def test_a_wait_given_up_never_keeps_the_lock_from_the_other_process(
    sqlite_file: SQLiteDatabase, holder: subprocess.Popen[str]
) -> None:
    # The thread that waits in flock is still blocked when the deadline ends the wait;
    # the lock comes to it once the holder lets go, with nobody here asking for it.
    for _ in range(3):
        _hold(holder)
        _give_up(sqlite_file)
        _let_go(holder)
    time.sleep(0.05)  # the lock, had the waiter kept it, would be its by now
    begun = time.monotonic()
    _hold(holder)  # the holder gets it again, and at once
    assert time.monotonic() - begun < HOLD
    _let_go(holder)


def test_a_store_closed_leaves_no_thread_waiting_for_the_lock(
    sqlite_file: SQLiteDatabase, holder: subprocess.Popen[str]
) -> None:
    before = set(threading.enumerate())
    _hold(holder)
    _give_up(sqlite_file)
    # Blocked in flock while the holder holds on: one thread, for all of the lock's waits.
    (waiting,) = [t for t in set(threading.enumerate()) - before if t.name == "pigeon-writer-lock"]
    sqlite_file.close()
    _let_go(holder)  # and the lock came to the waiting thread
    waiting.join(5)
    assert not waiting.is_alive()


def test_a_forked_childs_copy_of_the_waiter_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter = writer_lock._Waiter(str(tmp_path / "file-writer"))
    try:
        assert not waiter.forked
        monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a child of fork
        assert waiter.forked  # its thread is the parent's: the child makes its own
    finally:
        waiter.close()


def test_a_waiter_that_cannot_wait_leaves_the_wait_to_sqlite_from_then_on(
    sqlite_file: SQLiteDatabase, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_by_waiters = []

    def lock_file(path: str) -> int:  # the waiting thread's open fails, as on a full table
        if threading.current_thread().name == "pigeon-writer-lock":
            opened_by_waiters.append(path)
            raise OSError("too many open files")
        return real(path)

    real = files.lock_file
    monkeypatch.setattr(writer_lock, "lock_file", lock_file)
    for _ in range(3):
        _hold(holder)
        with sqlite_file.transaction() as tx:  # SQLite's busy handler waits it out
            tx.sql("DELETE FROM pigeon_jobs")
        _let_go(holder)
    assert len(opened_by_waiters) == 1  # one thread tried, not one a wait


def test_closing_a_store_while_a_thread_writes_leaves_no_lock_taken(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    first = open_server_db(path)
    assert isinstance(first, SQLiteDatabase)
    inside, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with first.writer:  # as a transaction holds it
                inside.set()
                go_on.wait(5)
        except BaseException as exc:  # a release on a descriptor closed under it
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    assert inside.wait(5)
    first.close()  # the holder still has it; its release lets go of the file
    go_on.set()
    thread.join(5)
    assert errors == []
    second = open_server_db(path)
    try:
        begun = time.monotonic()
        with deadline.waits_until(begun + 1.0), second.transaction() as tx:
            tx.sql("DELETE FROM pigeon_jobs")
    finally:
        second.close()
