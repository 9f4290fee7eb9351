"""``QueueStats``: what an edge queue holds, counted in one snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pigeon.storage.sqlite import SQLiteTx


@dataclass(frozen=True, slots=True)
class QueueStats:
    depth: int  # live operations: pending + in flight + conflict-held
    # Seconds since the oldest live head (the next operation of its entity) was made. An
    # operation waiting behind its entity's head is not counted, so the count reads the
    # heads only; a retried dead letter that is not a head is the one case it can miss.
    oldest_age: float | None
    in_flight: int
    dead: int
    conflicts: int
    delivered: int  # kept for the queue's keep_delivered (a week by default), then purged
    entities_blocked: int  # entities whose head is conflict-held or backing off
    paused: str | None  # why sending is paused (e.g. authorisation needed), or None
    coalesced: int = 0  # sends saved by coalescing since the file was made


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
        paused=state["paused"],
        coalesced=int(state["coalesced"]),
    )
