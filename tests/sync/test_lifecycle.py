"""Stopping and closing the engine from inside its own callbacks, and flush's timeout.

Real engine, real SQLite queue, real HttpTransport, the uvicorn wire app."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from pigeon.core.operation import Operation
from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.sync.classify import ReplyOutcome
from pigeon.sync.connectivity import ManualMonitor, ProbeMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions
from tests.protocol.wire_app import LiveServer, WireState
from tests.sync.conftest import MakeEngine
from tests.waiting import wait_for


@pytest.mark.parametrize("pipeline", [1, 2])
def test_close_from_a_callback_stops_the_engine_without_raising(
    make_engine: MakeEngine, queue: OfflineQueue, server: LiveServer, pipeline: int
) -> None:
    # "Signed out: stop syncing" from on_delivered (or on_paused). stop() joined the
    # engine's own thread from inside it: RuntimeError, swallowed as a callback error,
    # and the monitor's probe thread and the subscriptions were left behind. From a lane
    # thread (pipeline > 1) it waited its whole timeout for a thread waiting on it.
    transport = HttpTransport(server.url)
    monitor = ProbeMonitor(transport.probe, backoff=RetryPolicy(base=0.05, cap=0.1))
    raised: list[BaseException] = []
    returned = threading.Event()
    engine: SyncEngine | None = None

    def on_delivered(op: Operation, outcome: ReplyOutcome) -> None:
        assert engine is not None
        try:
            engine.close(timeout=5)
        except BaseException as exc:
            raised.append(exc)
        returned.set()

    engine = make_engine(
        transport, connectivity=monitor, on_delivered=on_delivered, pipeline=pipeline
    )
    engine.start()
    thread = engine._thread
    assert thread is not None
    started = time.monotonic()
    engine.enqueue("update", "thing:a", {"x": 1})
    assert returned.wait(5)
    assert time.monotonic() - started < 2  # not the join's whole timeout
    assert raised == []
    wait_for(lambda: not thread.is_alive(), 5.0, interval=0.01)
    assert not any(t.name == "pigeon-probe" for t in threading.enumerate())
    # Closed: the queue no longer wakes it.
    queue.enqueue("update", "thing:b", {"x": 1})
    time.sleep(0.2)
    assert queue.stats().depth == 1


@pytest.mark.parametrize("call", ["flush", "drain"])
def test_flush_and_drain_keep_their_timeout_while_a_request_is_on_the_wire(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, call: str
) -> None:
    # A "sync now" button with a timeout: the server is slow to answer. The cycle went on
    # in the caller's thread until the reply (or the transport's 10 s read timeout)
    # came, however small the timeout. It must return False on time, and the request,
    # left to finish, still settles its operation (once, and a later flush sees it).
    state.delay = 1.5
    engine = make_engine()
    op = queue.enqueue("update", "thing:a", {"x": 1})
    started = time.monotonic()
    assert getattr(engine, call)(timeout=0.3) is False
    assert time.monotonic() - started < 1.0
    state.delay = 0.0
    assert engine.flush(timeout=5)  # waits for the request still on the way
    assert queue.get(op.id).status.value == "delivered"
    assert len(state.effects("a")) == 1 and state.seen_keys[op.idempotency_key] == 1


class DiskFull(Exception):
    pass


class FullQueue(OfflineQueue):
    def next_batch(self, n: int = 100) -> list[Operation]:
        raise DiskFull("database or disk is full")


def test_flush_with_a_timeout_still_raises_what_the_queue_raises(
    tmp_path: Path, server: LiveServer
) -> None:
    queue = FullQueue(tmp_path / "full.db")
    with HttpTransport(server.url) as transport:
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
        with pytest.raises(DiskFull):
            engine.flush(timeout=2)
    queue.close()


class SlowDisk(OfflineQueue):
    """A real queue whose next ``next_batch`` after `hold()` waits (a disk stalled, a
    write lock held elsewhere) until `go()`."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.held = threading.Event()
        self.entered = threading.Event()
        self.gate = threading.Event()
        self._once = threading.Lock()

    def hold(self) -> None:
        self.gate.clear()
        self.held.set()

    def go(self) -> None:
        self.gate.set()

    def next_batch(self, n: int = 100) -> list[Operation]:
        if self.held.is_set() and self._once.acquire(blocking=False):
            self.held.clear()
            self.entered.set()
            self.gate.wait(10)
            self._once.release()
        return super().next_batch(n)


@pytest.mark.parametrize("call", ["flush", "drain"])
def test_flush_and_drain_see_another_threads_empty_cycle_end(
    tmp_path: Path, server: LiveServer, call: str
) -> None:
    # The background loop is in a cycle that will find nothing (woken by an enqueue that
    # flush took first, an idle recheck). flush/drain saw it on the way and waited for
    # its notice, but a cycle that takes nothing posts none: they waited out their whole
    # timeout, and with none, forever.
    queue = SlowDisk(tmp_path / "slow.db")
    with HttpTransport(server.url) as transport:
        engine = SyncEngine(queue, transport, SyncOptions(pipeline=2), connectivity=ManualMonitor())
        engine.start()
        try:
            queue.hold()
            engine.notify()
            assert queue.entered.wait(5)  # the loop's cycle is in next_batch
            threading.Timer(0.3, queue.go).start()
            started = time.monotonic()
            assert getattr(engine, call)(timeout=5) is True
            assert time.monotonic() - started < 2
        finally:
            queue.go()
            engine.stop()
    queue.close()


def test_cancelling_the_asyncio_task_never_blocks_the_event_loop(
    tmp_path: Path, state: WireState
) -> None:
    # Offline, the default monitor probes; this server accepts connections and never
    # answers, so a probe is a 2 s read. Cancelling run() stopped the monitor on the
    # event loop's thread: a join of the probe thread that froze every other task.
    import asyncio
    import contextlib
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    queue = OfflineQueue(tmp_path / "aio.db")
    transport = HttpTransport(url)
    monitor = ProbeMonitor(transport.probe, online=False)
    engine = SyncEngine(queue, transport, connectivity=monitor)

    async def main() -> float:
        task = asyncio.create_task(engine.run())
        await asyncio.to_thread(wait_for, lambda: monitor.probes >= 1, 5.0, interval=0.01)
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        ticking.cancel()
        return max(gaps)

    try:
        assert asyncio.run(main()) < 0.5
        wait_for(
            lambda: not any(t.name == "pigeon-probe" for t in threading.enumerate()),
            5.0,
            interval=0.01,
        )
    finally:
        engine.close()
        transport.close()
        silent.close()
        queue.close()


@pytest.mark.parametrize("batch", [False, True])
def test_a_closed_transport_sends_nothing_and_marks_nothing_sent(
    make_engine: MakeEngine, queue: OfflineQueue, server: LiveServer, batch: bool
) -> None:
    # Shut down in the wrong order: the transport is closed, the engine not yet. httpx
    # raised RuntimeError out of send(), and the executor released the operations as
    # possibly sent: never sent, they could no longer be cancelled or folded into.
    errors: list[BaseException] = []
    transport = HttpTransport(server.url, batch=batch)
    engine = make_engine(transport, on_error=errors.append)
    op = queue.enqueue("update", "thing:a", {"x": 1})
    transport.close()
    assert engine.flush(timeout=2) is False
    assert errors and "closed" in str(errors[-1])
    assert queue.get(op.id).attempts == 0
    queue.cancel(op.id)  # never sent: the app may still take it back
    assert queue.stats().depth == 0


def test_a_batch_reply_that_answers_none_of_its_operations_is_not_resent_in_a_loop(
    tmp_path: Path,
) -> None:
    # 200 {"results": []}: a server (or a proxy's cached page) that answered nothing about
    # any operation. They were released as never attempted and due at once, so the lane
    # sent them again, and again: a tight loop, no attempt spent, no backoff, no end.
    # A backoff of seconds, not the suite's FAST one: its full jitter can draw a wait of a
    # millisecond, after which flush rightly sends the operation again (a flaky "2 == 1").
    queue = OfflineQueue(
        tmp_path / "edge.db", QueueOptions(retry_policy=RetryPolicy(base=5.0, cap=5.0))
    )
    requests: list[int] = []

    def empty(request: httpx.Request) -> httpx.Response:
        requests.append(1)
        return httpx.Response(200, json={"results": []})

    with InProcessTransport(handler=empty, batch=True) as transport:
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
        op = queue.enqueue("update", "thing:a", {"x": 1})
        engine.flush(timeout=1)
    assert len(requests) == 1
    stored = queue.get(op.id)
    queue.close()
    assert stored.attempts == 1 and "none of" in (stored.last_error or "")
