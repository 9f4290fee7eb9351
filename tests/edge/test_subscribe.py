"""subscribe(): callbacks after each enqueue commits, outside any transaction, so a sync
engine wakes on a plain ``queue.enqueue``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import ConfigurationError
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[OfflineQueue]:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as q:
        yield q


def test_callbacks_run_after_the_commit_and_outside_any_transaction(
    queue: OfflineQueue, tmp_path: Path
) -> None:
    seen: list[tuple[int, bool]] = []

    def callback() -> None:
        # A second connection sees the row: it is committed, not merely written.
        with OfflineQueue(tmp_path / "q.db", QueueOptions(recover=False)) as other:
            seen.append((len(other.pending), queue._store.in_batch()))
        queue.stats()  # the queue is usable from inside the callback

    queue.subscribe(callback)
    queue.enqueue("create", "note:1", {})
    queue.enqueue("create", "note:2", {})
    assert seen == [(1, False), (2, False)]


def test_a_batch_tells_once_after_it_commits_and_not_at_all_if_rolled_back(
    queue: OfflineQueue,
) -> None:
    calls: list[int] = []
    queue.subscribe(lambda: calls.append(len(queue.pending)))
    with queue.batch():
        queue.enqueue("create", "note:1", {})
        with queue.batch():
            queue.enqueue("create", "note:2", {})
        assert calls == []
    assert calls == [2]
    with pytest.raises(RuntimeError), queue.batch():
        queue.enqueue("create", "note:3", {})
        raise RuntimeError("boom")
    assert calls == [2] and len(queue.pending) == 2
    with queue.batch():  # nothing enqueued: nothing to tell
        queue.release(queue.next_batch(1)[0].id)
    assert calls == [2]


def test_a_failing_callback_is_logged_and_the_others_still_run(
    queue: OfflineQueue, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise ValueError("subscriber bug")

    later: list[str] = []
    queue.subscribe(broken)
    queue.subscribe(lambda: later.append("ran"))
    with caplog.at_level(logging.ERROR, logger="pigeon.edge.queue"):
        op = queue.enqueue("create", "note:1", {})
    assert op.status is OpStatus.PENDING
    assert later == ["ran"]
    # Named with its type; its message (which may quote data) is not logged.
    assert "broken failed (ValueError)" in caplog.text
    assert "subscriber bug" not in caplog.text


def test_unsubscribe_stops_the_calls(queue: OfflineQueue) -> None:
    calls: list[str] = []

    def callback() -> None:
        calls.append("x")

    queue.subscribe(callback)
    queue.enqueue("create", "note:1", {})
    queue.unsubscribe(callback)
    queue.unsubscribe(callback)  # unknown by now: harmless
    queue.enqueue("create", "note:2", {})
    assert calls == ["x"]
    with pytest.raises(ConfigurationError, match="callable"):
        queue.subscribe("not a function")  # type: ignore[arg-type]


def test_invalid_enqueue_tells_nobody(queue: OfflineQueue) -> None:
    calls: list[str] = []
    queue.subscribe(lambda: calls.append("x"))
    with pytest.raises(ValueError):
        queue.enqueue("create", "", {})
    assert calls == []


def test_a_running_engine_wakes_on_a_plain_enqueue(queue: OfflineQueue) -> None:
    received: list[str] = []
    arrived = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        received.append(request.headers["Idempotency-Key"])
        arrived.set()
        return httpx.Response(201, json={"ok": True})

    with InProcessTransport(handler=handler) as transport:
        # idle_recheck is long: only the subscription can wake the engine in time.
        engine = SyncEngine(
            queue, transport, SyncOptions(idle_recheck=60.0), connectivity=ManualMonitor(True)
        )
        with engine:
            time.sleep(0.2)  # the engine has found nothing and sleeps until woken
            op = queue.enqueue("create", "note:1", {"title": "hi"})
            assert arrived.wait(10), "the engine did not wake on enqueue"
            deadline = time.monotonic() + 10
            while queue.get(op.id).status is not OpStatus.DELIVERED:
                assert time.monotonic() < deadline
                time.sleep(0.01)
    assert received == [op.idempotency_key]
