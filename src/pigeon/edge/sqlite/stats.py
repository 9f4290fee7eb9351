"""The counts of `QueueStats`, read from one transaction of the queue file."""

from __future__ import annotations

from typing import Any

from pigeon.edge.stats import QueueStats
from pigeon.storage.sqlite import SQLiteTx


def collect_stats(tx: SQLiteTx, now: float) -> QueueStats:
    """Every count from one transaction ``tx``, so they agree with each other."""
    state = tx.fetchone("get_state")
    assert state is not None
    oldest = tx.fetchone("oldest_head")
    created = None if oldest is None else oldest["created_at"]

    def count(name: str, **params: Any) -> int:
        row = tx.fetchone(name, params)
        return 0 if row is None else int(row["n"])

    return QueueStats(
        depth=count("count_live"),
        oldest_age=None if created is None else max(now - created, 0.0),
        in_flight=count("count_heads", status="in_flight"),
        dead=count("count_dead"),
        conflicts=count("count_heads", status="conflict"),
        delivered=count("count_delivered"),
        entities_blocked=count("count_blocked"),
        held=count("count_held"),
        paused=state["paused"],
        coalesced=int(state["coalesced"]),
    )
