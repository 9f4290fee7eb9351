"""A lane takes its next batch in the transaction that settles its last (`Executor.run_pass`
with ``then_take``): one commit and one fsync of the queue a batch, where it paid two.
What it took is its next pass's, sent by it or released unsent; nothing is taken while
events wait to be told (a callback may flush), nor when the settling rolls back."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from pigeon.sync.executor import Executor
from pigeon.sync.options import SyncOptions
from tests.sync.conftest import FailsToCommitOnce


@pytest.fixture
def server_db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    db = open_server_db(tmp_path / "server.db")
    yield db
    db.close()


@pytest.fixture
def transport(server_db: SQLiteDatabase) -> Iterator[InProcessTransport]:
    with InProcessTransport(create_notes_app(server_db, purge_interval=None), batch=True) as t:
        yield t


def _filled(queue: OfflineQueue, n: int) -> OfflineQueue:
    with queue.batch():
        for i in range(n):
            queue.enqueue("create", f"note:{i}", {"id": str(i), "title": "t", "body": "b"})
    return queue


@contextlib.contextmanager
def _transactions(queue: OfflineQueue) -> Iterator[list[list[str]]]:
    """This thread's statements on the queue's file, one list per transaction."""
    statements: list[str] = []
    connection = queue._store.db.connection()  # type: ignore[attr-defined]
    connection.set_trace_callback(statements.append)
    split: list[list[str]] = []
    try:
        yield split
    finally:
        connection.set_trace_callback(None)
    current: list[str] = []
    for sql in statements:
        current.append(sql)
        if sql.strip().upper() in ("COMMIT", "ROLLBACK"):
            split.append(current)
            current = []


def _delivers(tx: list[str]) -> bool:
    return any("SET status = 'delivered'" in sql for sql in tx)


def _takes(tx: list[str]) -> bool:
    return any("SET status = 'in_flight'" in sql for sql in tx)


def test_the_next_batch_is_taken_in_the_settling_transaction(
    tmp_path: Path, transport: InProcessTransport, server_db: SQLiteDatabase
) -> None:
    with _filled(OfflineQueue(tmp_path / "edge.db"), 150) as queue:
        executor = Executor(queue, transport)
        with _transactions(queue) as txs:
            report, following = executor.run_pass(100, then_take=lambda _: True)
        assert report.delivered == 100
        assert following is not None and len(following) == 50
        assert queue.stats().in_flight == 50
        settling = [tx for tx in txs if _delivers(tx)]
        assert len(settling) == 1 and _takes(settling[0]), txs
        # The pass over what was taken: nothing is left to take after it.
        report, following = executor.run_pass(100, taken=following, then_take=lambda _: True)
        assert report.taken == report.delivered == 50 and following is None
    assert len(read_ledger(server_db)) == 150


def test_nothing_is_taken_when_the_lane_would_not_go_on(
    tmp_path: Path, transport: InProcessTransport
) -> None:
    with _filled(OfflineQueue(tmp_path / "edge.db"), 150) as queue:
        with _transactions(queue) as txs:
            report, following = Executor(queue, transport).run_pass(100, then_take=lambda _: False)
        assert report.delivered == 100 and following is None
        assert not any(_takes(tx) for tx in txs if _delivers(tx))
        assert queue.stats().in_flight == 0


def test_nothing_is_taken_while_events_wait_to_be_told(
    tmp_path: Path, transport: InProcessTransport
) -> None:
    """An ``on_delivered`` callback may flush: it must not find operations taken that no
    pass is sending."""
    told: list[str] = []
    with _filled(OfflineQueue(tmp_path / "edge.db"), 150) as queue:
        callbacks = SyncCallbacks(on_delivered=lambda op, _: told.append(op.id))
        executor = Executor(queue, transport, callbacks)
        report, following = executor.run_pass(100, then_take=lambda _: True)
        assert report.delivered == len(told) == 100 and following is None
        assert queue.stats().in_flight == 0


def test_what_was_taken_for_a_pass_that_does_not_run_is_released_unsent(
    tmp_path: Path, transport: InProcessTransport
) -> None:
    with _filled(OfflineQueue(tmp_path / "edge.db"), 150) as queue:
        executor = Executor(queue, transport)
        _, following = executor.run_pass(100, then_take=lambda _: True)
        assert following is not None
        executor.release_taken(following)
        assert queue.stats().in_flight == 0
        # Never sent: a later edit still folds into the create.
        entity = following[0].entity
        queue.enqueue("update", entity, {"id": entity[5:], "title": "t", "body": "two"})
        assert [op.type for op in queue.pending if op.entity == entity] == ["create"]


def test_a_settling_that_rolls_back_takes_nothing(
    tmp_path: Path, transport: InProcessTransport, server_db: SQLiteDatabase
) -> None:
    with _filled(FailsToCommitOnce(tmp_path / "edge.db"), 150) as queue:
        queue.armed = True
        executor = Executor(queue, transport)
        with pytest.raises(sqlite3.OperationalError):
            executor.run_pass(100, then_take=lambda _: True)
        assert queue.stats().in_flight == 0  # neither the batch nor a next one held
        while queue.stats().depth:
            executor.run_once(100)
        assert len(read_ledger(server_db)) == 150


def test_a_pause_while_a_lane_holds_its_next_batch_releases_it(
    tmp_path: Path, transport: InProcessTransport, server_db: SQLiteDatabase
) -> None:
    """Paused by another party between the settling (which took the next batch) and that
    batch's pass: the lane stops, and the batch goes back unsent, due at once."""

    class PausedOnceAfterTaking(OfflineQueue):
        taken_for_next: tuple[str, ...] = ()

        def next_batch(self, n: int = 100) -> list[Operation]:
            ops = super().next_batch(n)
            if ops and self._store.in_batch() and not self.taken_for_next:  # type: ignore[attr-defined]
                self.taken_for_next = tuple(op.id for op in ops)
                self.pause("paused meanwhile")
            return ops

    with _filled(PausedOnceAfterTaking(tmp_path / "edge.db"), 250) as queue:
        engine = SyncEngine(
            queue, transport, SyncOptions(cycle_size=100), connectivity=ManualMonitor(True)
        )
        assert not engine.flush()  # stopped by the pause
        assert len(read_ledger(server_db)) == 100  # only the first batch went out
        assert queue.stats().in_flight == 0
        held = [queue.get(op_id) for op_id in queue.taken_for_next]
        assert len(held) == 100 and {op.status for op in held} == {OpStatus.PENDING}
        queue.resume()
        assert engine.drain(timeout=30)
        engine.close()
    ledger = read_ledger(server_db)
    assert len(ledger) == 250 and len({row["idempotency_key"] for row in ledger}) == 250


def test_drain_waits_for_a_batch_a_lane_took_in_its_settling(
    tmp_path: Path, server_db: SQLiteDatabase
) -> None:
    """The background loop's lane settles its first batch and takes the second in that
    transaction, then looks whether the queue is paused before sending it, and is held
    there: a drain in another thread, which finds nothing due meanwhile, must wait for
    that batch, as it would not if the lane's cycle ended with its settling."""
    looking, go_on = threading.Event(), threading.Event()

    class HeldWhileLooking(OfflineQueue):
        @property
        def paused(self) -> str | None:
            in_loop = threading.current_thread().name == "pigeon-sync"
            if in_loop and not looking.is_set() and self.stats().delivered >= 100:
                looking.set()
                go_on.wait(30)  # the batch taken in the settling waits meanwhile
            return super().paused

    with (
        InProcessTransport(create_notes_app(server_db, purge_interval=None), batch=True) as t,
        _filled(HeldWhileLooking(tmp_path / "edge.db"), 200) as queue,
        ThreadPoolExecutor(1) as pool,
    ):
        engine = SyncEngine(queue, t, SyncOptions(cycle_size=100), connectivity=ManualMonitor(True))
        engine.start()
        try:
            assert looking.wait(30), "the first batch was never settled"
            assert queue.stats().in_flight == 100  # the second, taken in the settling
            drained = pool.submit(engine.drain, 60)
            time.sleep(0.3)  # a drain that saw nothing on the way returned by now
            assert not drained.done(), "drain returned with a batch taken and not sent"
            go_on.set()
            assert drained.result()
            stats = queue.stats()
            assert (stats.depth, stats.in_flight) == (0, 0)
        finally:
            go_on.set()
            engine.close()
    assert len(read_ledger(server_db)) == 200
