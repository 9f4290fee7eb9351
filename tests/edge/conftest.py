from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from tests.clocks import FakeClock


@pytest.fixture
def queue(tmp_path: Path, clock: FakeClock) -> Iterator[OfflineQueue]:
    with OfflineQueue(
        tmp_path / "queue.db",
        QueueOptions(durability="normal", retry_policy=RetryPolicy()),
        now=clock,
    ) as q:
        yield q
