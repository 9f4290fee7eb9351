from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from pigeon.sync.options import SyncOptions
from tests.protocol.wire_app import LiveServer, WireState, live_server

# Fast backoff so retries happen within a test; Retry-After from the server still wins.
FAST = RetryPolicy(base=0.05, factor=2.0, cap=0.2, max_attempts=8)


@pytest.fixture
def state() -> WireState:
    return WireState()


@pytest.fixture
def server(state: WireState) -> Iterator[LiveServer]:
    with live_server(state) as running:
        yield running


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[OfflineQueue]:
    # coalesce=False: tests count every operation on the wire, in order.
    q = OfflineQueue(tmp_path / "edge.db", QueueOptions(retry_policy=FAST, coalesce=False))
    yield q
    q.close()


MakeEngine = Callable[..., SyncEngine]


@pytest.fixture
def make_engine(queue: OfflineQueue, server: LiveServer) -> Iterator[MakeEngine]:
    made: list[tuple[SyncEngine, HttpTransport]] = []

    def make(transport: HttpTransport | None = None, **given: Any) -> SyncEngine:
        """``given``: SyncOptions' fields, SyncCallbacks' (``on_...``), and the engine's
        other keyword arguments, sorted into their places."""
        transport = transport or HttpTransport(server.url)
        settings = {k: given.pop(k) for k in list(given) if k in SyncOptions.__dataclass_fields__}
        callbacks = {k: given.pop(k) for k in list(given) if k.startswith("on_")}
        given.setdefault("connectivity", ManualMonitor())
        engine = SyncEngine(
            queue,
            transport,
            SyncOptions(**settings),
            callbacks=SyncCallbacks(**callbacks),
            **given,
        )
        made.append((engine, transport))
        return engine

    yield make
    for engine, transport in made:
        engine.stop()
        transport.close()


class FailsToCommitOnce(OfflineQueue):
    """A queue whose next ``batch()`` after ``armed`` is set fails at its commit, once:
    everything in it was written, the commit is what fails (and rolls it all back)."""

    armed = False

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        with super().batch():
            yield
            if self.armed:
                self.armed = False
                raise sqlite3.OperationalError("disk I/O error")
