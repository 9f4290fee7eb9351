"""Retry-After from the server: a lower bound on the wait, never a way around backoff.

The real engine, a real SQLite queue, the real HTTP transport and the uvicorn wire app
scripted to answer 429 / 503 with ``Retry-After: 0``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.core.operation import OpStatus
from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions
from tests.protocol.wire_app import Fault, LiveServer, WireState

# Every wait is drawn from [0, 0.2 s]: eight attempts take about 0.7 s, and less than
# 0.15 s only with a chance of about one in a million.
EVEN = RetryPolicy(base=0.2, factor=1.0, cap=0.2, max_attempts=8)


@pytest.fixture
def slow_queue(tmp_path: Path) -> Iterator[OfflineQueue]:
    q = OfflineQueue(tmp_path / "edge.db", QueueOptions(retry_policy=EVEN, coalesce=False))
    yield q
    q.close()


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("batch", [False, True])
def test_retry_after_zero_does_not_burn_the_attempts_at_once(
    slow_queue: OfflineQueue, server: LiveServer, state: WireState, status: int, batch: bool
) -> None:
    # A server (or a rate limiter rounding "0.4 s" down) that always says Retry-After: 0.
    # Honoured exactly, the eight attempts went out back to back and the operation was
    # dead within milliseconds; it must take the policy's backoff like any failure.
    state.faults["a"] = [Fault(status, retry_after="0") for _ in range(8)]
    with HttpTransport(server.url, batch=batch) as transport:
        engine = SyncEngine(slow_queue, transport, connectivity=ManualMonitor())
        op = slow_queue.enqueue("update", "thing:a", {"x": 1}, endpoint="/things/a")
        with engine:
            time.sleep(0.15)
            early = slow_queue.get(op.id)
            assert early.status is not OpStatus.DEAD and early.attempts < 8
            assert engine.drain(timeout=10)
    assert slow_queue.get(op.id).status is OpStatus.DEAD  # the policy still ends it
    assert state.seen_keys[op.idempotency_key] == 8


def test_key_in_progress_with_retry_after_zero_is_not_resent_in_a_tight_loop(
    slow_queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    # 409 "key in progress" spends no attempt, so nothing ever ended a loop of instant
    # resends while the server (a third-party one, saying 0) worked on the key.
    from pigeon.core import wire

    in_progress = Fault(409, retry_after="0", problem=wire.PROBLEM_KEY_IN_PROGRESS)
    state.faults["a"] = [in_progress for _ in range(30)]
    with HttpTransport(server.url) as transport:
        engine = SyncEngine(slow_queue, transport, connectivity=ManualMonitor())
        op = slow_queue.enqueue("update", "thing:a", {"x": 1}, endpoint="/things/a")
        with engine:
            time.sleep(0.3)
            # Waits drawn from [0, 0.2 s]: about four tries, not one per round trip.
            assert state.seen_keys[op.idempotency_key] < 12
            assert slow_queue.get(op.id).attempts == 0


@pytest.mark.parametrize("batch", [False, True])
def test_a_429_holds_the_whole_queue_back_not_just_its_operation(
    slow_queue: OfflineQueue, server: LiveServer, state: WireState, batch: bool
) -> None:
    # 429 is about this client's rate, not the operation. The pass went on sending every
    # other operation (single mode: one 429 and one attempt spent each; batch mode: the
    # next batch at once), and each later pass the same, until the attempts ran out.
    # After a 429 nothing more goes out before its Retry-After.
    state.rate_limited = "1"
    ops = [
        slow_queue.enqueue("update", f"thing:e{i}", {"i": i}, endpoint=f"/things/e{i}")
        for i in range(20)
    ]
    with HttpTransport(server.url, batch=batch) as transport:
        engine = SyncEngine(
            slow_queue, transport, SyncOptions(cycle_size=5), connectivity=ManualMonitor()
        )
        with engine:
            time.sleep(0.5)
            assert state.limited_requests == 1
            spent = sum(slow_queue.get(op.id).attempts for op in ops)
            assert spent == (5 if batch else 1)  # one request's operations
            state.rate_limited = None
            assert engine.drain(timeout=10)
    assert len(state.effects()) == 20


def test_a_429_whose_wait_is_already_over_holds_nothing_back(
    tmp_path: Path, server: LiveServer, state: WireState
) -> None:
    # The hold after a 429 ends at the operation's own retry, which can come within a
    # millisecond (no Retry-After, a short backoff). Looked at after it ended, flush said
    # False ("held back") and drain gave up; they must just go on sending.
    quick = RetryPolicy(base=0.001, factor=1.0, cap=0.001, max_attempts=8)
    queue = OfflineQueue(tmp_path / "quick.db", QueueOptions(retry_policy=quick, coalesce=False))
    state.faults["a"] = [Fault(429)]
    with HttpTransport(server.url) as transport:
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
        queue.enqueue("update", "thing:a", {"x": 1}, endpoint="/things/a")
        assert engine.flush(timeout=5)
        queue.enqueue("update", "thing:b", {"x": 1}, endpoint="/things/b")
        state.faults["b"] = [Fault(429)]
        assert engine.drain(timeout=5)
    assert len(state.effects()) == 2
    queue.close()
