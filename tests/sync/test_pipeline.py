"""SyncEngine(pipeline=N): several batches on the way at once, per-entity order intact;
with more than one, one more lane takes its batch meanwhile, never a batch more on the way."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from pigeon.core.operation import Operation
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import ConfigurationError
from pigeon.protocol.http import HttpTransport
from pigeon.protocol.transport import Exchange, KeepGoing
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions
from tests.protocol.wire_app import Fault, LiveServer, WireState
from tests.sync.conftest import MakeEngine


class Watched(HttpTransport):
    """The real transport, noting how many sends were on the way at once and what each
    carried (no operation may ever be in two batches on the way)."""

    def __init__(self, url: str, queue: OfflineQueue | None = None, **options: Any) -> None:
        super().__init__(url, **options)
        self.queue = queue  # given: how many operations are taken as each send leaves
        self.taken: list[int] = []
        self._lock = threading.Lock()
        self.on_the_way: set[str] = set()
        self.sending = 0
        self.most = 0
        self.overlaps: list[str] = []

    def send(
        self, operations: Sequence[Operation], *, keep_going: KeepGoing | None = None
    ) -> Exchange:
        entities = {op.entity for op in operations}
        if self.queue is not None:
            self.taken.append(self.queue.stats().in_flight)
        with self._lock:
            self.overlaps += sorted(entities & self.on_the_way)
            self.on_the_way |= entities
            self.sending += 1
            self.most = max(self.most, self.sending)
        try:
            return super().send(operations, keep_going=keep_going)
        finally:
            with self._lock:
                self.on_the_way -= entities
                self.sending -= 1


def test_two_batches_on_the_way_deliver_everything_once_in_entity_order(
    make_engine: MakeEngine, queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    state.delay = 0.05  # a server slow enough for the second batch to leave meanwhile
    transport = Watched(server.url, batch=True)
    engine = make_engine(transport, cycle_size=10, pipeline=2)
    for i in range(5):  # 40 entities, 5 operations each, interleaved
        for e in range(40):
            queue.enqueue("update", f"thing:e{e}", {"i": i})
    assert engine.drain(timeout=60)
    assert transport.most >= 2, "the second batch left while the first was on the way"
    assert transport.overlaps == [], "an entity was in two batches on the way"
    for e in range(40):
        assert [x["body"] for x in state.effects(f"e{e}")] == [{"i": i} for i in range(5)]
    assert len(state.effects()) == 200 and engine.totals.delivered == 200
    assert queue.stats().depth == 0


def test_a_third_lane_takes_its_batch_while_two_are_on_the_way_and_waits_its_turn(
    make_engine: MakeEngine, queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    state.delay = 0.05
    transport = Watched(server.url, queue, batch=True)
    engine = make_engine(transport, cycle_size=10, pipeline=2)
    for e in range(200):
        queue.enqueue("update", f"thing:e{e}", {"i": 0})
    assert engine.drain(timeout=60)
    assert transport.most == 2, "never more batches on the way than the pipeline"
    # Two lanes alone never hold more than 20 operations: a third took its 10 meanwhile.
    assert max(transport.taken) > 20, transport.taken
    assert len(state.effects()) == 200 and queue.stats().depth == 0


def test_a_failing_entity_still_holds_back_only_itself_with_a_pipeline(
    make_engine: MakeEngine, queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    state.faults["e0"] += [Fault(503, retry_after="0.2"), Fault(500, after_effect=True)]
    engine = make_engine(HttpTransport(server.url, batch=True), cycle_size=5, pipeline=3)
    for i in range(3):
        for e in range(20):
            queue.enqueue("update", f"thing:e{e}", {"i": i})
    assert engine.drain(timeout=60)
    for e in range(20):
        assert [x["body"] for x in state.effects(f"e{e}")] == [{"i": i} for i in range(3)]
    assert engine.totals.replayed == 1  # e0's lost reply came back as a replay, not twice


def test_background_thread_with_a_pipeline(
    queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    with HttpTransport(server.url, batch=True) as transport:
        engine = SyncEngine(
            queue, transport, SyncOptions(cycle_size=4, pipeline=2), connectivity=ManualMonitor()
        )
        with engine:
            for e in range(30):
                engine.enqueue("update", f"thing:e{e}", {"i": 0})
            deadline = time.monotonic() + 20
            while len(state.effects()) < 30 and time.monotonic() < deadline:
                time.sleep(0.02)
    assert sorted(x["entity"] for x in state.effects()) == sorted(f"e{e}" for e in range(30))
    assert queue.stats().depth == 0


@pytest.mark.parametrize("bad", [0, 17, True, 1.5])
def test_bad_pipeline_is_refused(queue: OfflineQueue, bad: object) -> None:
    with (
        HttpTransport("http://x") as transport,
        pytest.raises(ConfigurationError, match="pipeline"),
    ):
        SyncEngine(queue, transport, SyncOptions(pipeline=bad))  # type: ignore[arg-type]
