"""The engine keeps going: exceptions in its loop, failing token callables, and flush /
drain that neither spin nor return while operations are still on the way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from typing import Any

import httpx
import pytest

from pigeon.core.operation import Operation, OpStatus
from pigeon.core.retry import RetryPolicy
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import NotSent
from pigeon.protocol.http import HttpTransport
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.sync.classify import ReplyOutcome
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions
from tests.protocol.wire_app import Fault, LiveServer, WireState
from tests.sync.conftest import MakeEngine

# Backoff after an error: short, so a test waits milliseconds, not the default seconds.
QUICK = RetryPolicy(base=0.01, factor=2.0, cap=0.05, max_attempts=1_000_000)


class Recorder:
    """on_delivered and on_error in one place, with an event per delivery."""

    def __init__(self) -> None:
        self.delivered: list[str] = []
        self.errors: list[BaseException] = []
        self.delivery = threading.Semaphore(0)

    def on_delivered(self, op: Operation, outcome: ReplyOutcome) -> None:
        self.delivered.append(op.entity)
        self.delivery.release()

    def on_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


def test_a_token_callable_that_raises_once_costs_no_attempt_and_no_thread(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, server: LiveServer
) -> None:
    calls = {"n": 0}

    def token() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("token refresh failed")  # app code: any exception
        return "alice"

    seen = Recorder()
    monitor = ManualMonitor()
    engine = make_engine(
        HttpTransport(server.url, token=token),
        connectivity=monitor,
        reconnect=QUICK,
        on_delivered=seen.on_delivered,
        on_error=seen.on_error,
    )
    engine.start()
    op = engine.enqueue("update", "thing:a", {"x": 1})
    assert seen.delivery.acquire(timeout=10), "the engine stopped delivering"
    assert engine._thread is not None and engine._thread.is_alive()
    stored = queue.get(op.id)
    assert stored.status is OpStatus.DELIVERED and stored.attempts == 0
    assert len(seen.errors) == 1 and isinstance(seen.errors[0], NotSent)
    assert isinstance(seen.errors[0].__cause__, RuntimeError)
    assert engine.last_error is seen.errors[0]
    assert monitor.online  # a failing token says nothing about the server
    assert state.seen_keys[op.idempotency_key] == 1
    engine.enqueue("update", "thing:b", {"x": 1})  # and it goes on
    assert seen.delivery.acquire(timeout=10)


def test_a_step_that_raises_does_not_kill_the_background_thread(
    make_engine: MakeEngine, queue: OfflineQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    failure = sqlite3.OperationalError("disk I/O error")
    next_batch = queue.next_batch
    calls = {"n": 0}

    def flaky(n: int = 100) -> list[Operation]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise failure
        return next_batch(n)

    monkeypatch.setattr(queue, "next_batch", flaky)
    seen = Recorder()
    engine = make_engine(reconnect=QUICK, on_delivered=seen.on_delivered, on_error=seen.on_error)
    engine.start()
    engine.enqueue("update", "thing:a", {"x": 1})
    assert seen.delivery.acquire(timeout=10), "the engine thread died"
    assert engine._thread is not None and engine._thread.is_alive()
    assert seen.errors == [failure] and engine.last_error is failure
    engine.enqueue("update", "thing:b", {"x": 1})
    assert seen.delivery.acquire(timeout=10)


def test_a_step_that_raises_does_not_end_the_asyncio_task(
    make_engine: MakeEngine, queue: OfflineQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    failure = RuntimeError("a bug in a custom queue")
    next_due_at = queue.next_due_at
    calls = {"n": 0}

    def flaky() -> float | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise failure
        return next_due_at()

    monkeypatch.setattr(queue, "next_due_at", flaky)
    errors: list[BaseException] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        delivered = asyncio.Event()

        def on_delivered(op: Operation, outcome: Any) -> None:
            loop.call_soon_threadsafe(delivered.set)

        engine = make_engine(reconnect=QUICK, on_delivered=on_delivered, on_error=errors.append)
        task = asyncio.create_task(engine.run())
        await asyncio.wait_for(_until(lambda: calls["n"] >= 1), 10)  # the first step raised
        await asyncio.to_thread(engine.enqueue, "update", "thing:a", {"x": 1})
        await asyncio.wait_for(delivered.wait(), 10)
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert errors == [failure]


def test_drain_sleeps_through_a_backoff_instead_of_spinning(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No background thread: nobody clears the wake-up flag that engine.enqueue set, and
    drain used to wait on it, returning at once, ~20,000 times a second."""
    engine = make_engine()
    state.faults["a"].append(Fault(503, retry_after="1"))
    op = engine.enqueue("update", "thing:a", {"x": 1})
    looks = {"n": 0}
    next_due_at = queue.next_due_at

    def counted() -> float | None:
        looks["n"] += 1
        return next_due_at()

    monkeypatch.setattr(queue, "next_due_at", counted)
    assert engine.drain(timeout=10)
    assert queue.get(op.id).status is OpStatus.DELIVERED
    assert looks["n"] <= 5, f"drain looked at the queue {looks['n']} times in one backoff"


def test_flush_and_drain_wait_for_what_another_lane_has_on_the_way(
    queue: OfflineQueue,
) -> None:
    """pipeline=2: the background thread has thing:a's first update on the wire and its
    second waits behind it. Neither is due, so flush and drain used to say "done"."""
    gate, entered = threading.Event(), threading.Event()
    bodies: list[Any] = []

    def slow_server(request: httpx.Request) -> httpx.Response:
        entered.set()
        gate.wait(10)
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={})

    with InProcessTransport(handler=slow_server) as transport:
        engine = SyncEngine(queue, transport, SyncOptions(pipeline=2), connectivity=ManualMonitor())
        engine.start()
        try:
            engine.enqueue("update", "thing:a", {"i": 0})
            assert entered.wait(10)
            engine.enqueue("update", "thing:a", {"i": 1})
            # The gate stays shut throughout: a True here is a lie, whatever the timing.
            assert engine.flush(timeout=0.3) is False
            assert engine.drain(timeout=0.3) is False
            gate.set()
            assert engine.drain(timeout=10)
            assert bodies == [{"i": 0}, {"i": 1}]
            assert queue.stats().depth == 0 and queue.stats().in_flight == 0
        finally:
            gate.set()
            engine.stop()


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.01)
