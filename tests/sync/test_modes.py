"""The engine in the background: thread mode, asyncio mode, and enqueue never blocked."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from pigeon.core.operation import Operation
from pigeon.edge.queue import OfflineQueue
from pigeon.sync.classify import ReplyOutcome
from pigeon.sync.connectivity import ManualMonitor
from tests.protocol.wire_app import Fault, LiveServer, WireState
from tests.sync.conftest import MakeEngine
from tests.waiting import wait_for


def test_thread_mode_syncs_on_enqueue_and_on_backoff_timer(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    delivered = threading.Semaphore(0)
    engine = make_engine(on_delivered=lambda op, outcome: delivered.release())
    state.faults["b"].append(Fault(503, retry_after="0.3"))
    with engine:
        engine.enqueue("update", "thing:a", {"x": 1})
        assert delivered.acquire(timeout=5)  # woken by enqueue
        started = time.monotonic()
        engine.enqueue("update", "thing:b", {"x": 1})
        assert delivered.acquire(timeout=5)  # woken by its own backoff timer
        assert time.monotonic() - started >= 0.25
    assert queue.stats().depth == 0 and len(state.effects()) == 2


def test_asyncio_mode(make_engine: MakeEngine, queue: OfflineQueue, state: WireState) -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        seen: list[str] = []

        def delivered(op: Operation, outcome: ReplyOutcome) -> None:
            seen.append(op.entity)
            if len(seen) == 3:
                loop.call_soon_threadsafe(done.set)

        engine = make_engine(on_delivered=delivered)
        task = asyncio.create_task(engine.run())
        for entity in ("thing:a", "thing:b", "thing:a"):
            await asyncio.to_thread(engine.enqueue, "update", entity, {"e": entity})
        await asyncio.wait_for(done.wait(), 5)
        assert await engine.aflush(timeout=5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return seen

    seen = asyncio.run(main())
    assert sorted(seen) == ["thing:a", "thing:a", "thing:b"]
    assert queue.stats().depth == 0


def test_cancelling_the_asyncio_task_stops_the_sync_after_its_cycle(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    state.delay = 0.05  # each request takes a while: the drain below would last ~10 s
    for i in range(200):
        queue.enqueue("update", f"thing:e{i}", {"i": i})

    async def main() -> None:
        engine = make_engine(cycle_size=5)
        task = asyncio.create_task(engine.run())
        await asyncio.sleep(0.3)  # a few cycles in, the worker thread busy with one
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    time.sleep(0.5)  # the cycle in progress (5 requests, ~0.25 s) may still finish
    sent = state.single_requests
    time.sleep(0.5)
    assert state.single_requests == sent, "the engine kept syncing after its task was cancelled"
    assert sent < 200


def test_enqueue_is_never_blocked_by_a_slow_sync(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    state.delay = 1.5  # every request sits on the server this long
    engine = make_engine()
    with engine:
        engine.enqueue("update", "thing:slow", {"x": 0})
        wait_for(lambda: state.single_requests >= 1, 5.0, interval=0.01)
        started = time.monotonic()
        timings = []
        for i in range(20):
            t0 = time.perf_counter()
            engine.enqueue("update", f"thing:{i}", {"x": i})
            timings.append(time.perf_counter() - t0)
        assert time.monotonic() - started < 1.0  # all 20 while the request is on the wire
        assert state.effects() == []  # nothing was answered yet
    assert max(timings) < 0.25, timings


def test_offline_holds_everything_until_set_online(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    monitor = ManualMonitor(online=False)
    engine = make_engine(connectivity=monitor)
    with engine:
        engine.enqueue("update", "thing:a", {"x": 1})
        time.sleep(0.3)
        assert state.single_requests == 0 and queue.stats().depth == 1
        engine.set_online(True)
        wait_for(lambda: queue.stats().depth == 0, 5.0, interval=0.01)
    assert len(state.effects("a")) == 1


def test_server_outage_releases_without_spending_attempts_and_probe_brings_it_back(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, server: LiveServer
) -> None:
    from pigeon.core.retry import RetryPolicy
    from pigeon.protocol.http import HttpTransport
    from pigeon.sync.connectivity import ProbeMonitor

    transport = HttpTransport(server.url)
    monitor = ProbeMonitor(transport.probe, backoff=RetryPolicy(base=0.05, cap=0.1))
    engine = make_engine(transport, connectivity=monitor)
    server.stop()
    with engine:
        op = engine.enqueue("update", "thing:a", {"x": 1})
        wait_for(lambda: not monitor.online, 5.0, interval=0.01)
        wait_for(lambda: monitor.probes >= 2, 5.0, interval=0.01)
        stored = queue.get(op.id)
        assert stored.attempts == 0 and stored.status.value == "pending"
        server.start()
        wait_for(lambda: queue.stats().depth == 0, 5.0, interval=0.01)
    assert monitor.online and len(state.effects("a")) == 1


def test_a_5xx_from_the_health_route_is_a_working_network_not_an_outage(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, server: LiveServer
) -> None:
    # The default monitor goes offline on a failed connection and probes. A probe that
    # gets any HTTP answer proves the network path: a 5xx (a gateway before a sick
    # server, or a server with no such route) is the executor's business (transient,
    # backoff, same key). Read as "offline", it stranded the background loop for as long
    # as the health route answered 5xx, although the operation routes worked.
    from pigeon.core.retry import RetryPolicy
    from pigeon.protocol.http import HttpTransport
    from pigeon.sync.connectivity import ProbeMonitor

    state.health_status = 502
    transport = HttpTransport(server.url)
    monitor = ProbeMonitor(transport.probe, backoff=RetryPolicy(base=0.05, cap=0.1))
    engine = make_engine(transport, connectivity=monitor)
    server.stop()
    with engine:
        engine.enqueue("update", "thing:a", {"x": 1})
        wait_for(lambda: not monitor.online, 5.0, interval=0.01)
        server.start()
        wait_for(lambda: queue.stats().depth == 0, 5.0, interval=0.01)
    assert monitor.online and len(state.effects("a")) == 1


def test_start_after_a_stop_that_timed_out_never_runs_two_loops(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    # stop(timeout) can return while the loop is still in a request. A start() then must
    # not clear the stop under that loop and add a second one beside it (two loops, each
    # taking batches, and stop() joining only the newer): it waits for the old one first.
    state.delay = 0.8
    engine = make_engine()
    engine.start()
    engine.enqueue("update", "thing:a", {"x": 1})
    wait_for(lambda: state.single_requests >= 1, 5.0, interval=0.01)
    engine.stop(timeout=0.05)  # returns; the loop is still waiting for its reply
    engine.start()
    loops = [t for t in threading.enumerate() if t.name == "pigeon-sync" and t.is_alive()]
    try:
        assert len(loops) == 1, f"{len(loops)} sync loops"
        engine.enqueue("update", "thing:b", {"x": 2})
        assert engine.flush(timeout=5)
    finally:
        engine.close()
    assert [e["entity"] for e in state.effects()] == ["a", "b"]
