"""``QueueStats``: what an edge queue holds, counted in one snapshot (by its store:
`pigeon.edge.sqlite.stats`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueStats:
    depth: int  # live operations: pending + in flight + conflict-held
    # Seconds since the oldest live head (the next operation of its entity) was made. An
    # operation waiting behind its entity's head is not counted, so the count reads the
    # heads only.
    oldest_age: float | None
    in_flight: int
    dead: int
    conflicts: int
    delivered: int  # kept for the queue's keep_delivered (a week by default), then purged
    entities_blocked: int  # entities whose head is dead, conflict-held or backing off
    paused: str | None  # why sending is paused (e.g. authorisation needed), or None
    coalesced: int = 0  # sends saved by coalescing since the file was made
    # Live operations held behind their entity's dead head (counted in ``depth`` too):
    # not sent until it is retried (it goes first) or discarded.
    held: int = 0
