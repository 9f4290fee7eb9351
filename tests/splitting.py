"""A queue's creates drained in batches by the real engine and HTTP transport, for the
tests that a batch a server refuses with 413 is split by the edge and all delivered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from tests.sync.conftest import FAST


def delivered_in_batches(
    url: str, edge_db: Path, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> tuple[list[str], list[int]]:
    """A create of each of ``bodies`` (entity ``note:<id>``) queued at ``edge_db`` and
    drained to ``url`` in batches, every one of them delivered: their keys, in order, and
    the statuses the server answered, in turn."""
    statuses: list[int] = []
    with (
        OfflineQueue(edge_db, QueueOptions(retry_policy=FAST, coalesce=False)) as queue,
        httpx.Client(
            base_url=url,
            headers=headers,
            event_hooks={"response": [lambda r: statuses.append(r.status_code)]},
        ) as client,
        HttpTransport(client=client, batch=True) as transport,
    ):
        made = [queue.enqueue("create", f"note:{body['id']}", body) for body in bodies]
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
        assert engine.drain(timeout=60)
        assert [queue.get(op.id).status for op in made] == [OpStatus.DELIVERED] * len(made)
    return [op.idempotency_key for op in made], statuses
