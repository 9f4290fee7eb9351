"""The queue's clock: one hybrid logical clock per queue file, however many processes.

Every process that opens a queue file stamps with the file's node id (``edge_state``), so
the server's last-write-wins sees one node. Each process also has its own clock in memory,
and two such clocks know nothing of each other: restored to the same stamp, or just
ticking in the same millisecond, they issue equal stamps, or a later operation a smaller
one, and the server lets the later write lose.

So the file is the clock's floor. A write transaction that stamps operations (it holds
the write lock, so no other process can stamp meanwhile) first reads ``edge_state.clock``
and observes it, then stamps its operations in queue order, and writes the greatest stamp
back before it commits (`pigeon.edge.sqlite.append.write`). ``edge_state.clock`` is then
never below a stamp stored in the file, and a restart needs nothing else to stay ahead,
whatever the device clock did meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from pigeon.core.clock import HLCTimestamp, HybridLogicalClock
from pigeon.storage.sqlite import SQLiteTx


class FileClock:
    """A hybrid logical clock whose floor is the queue file's ``edge_state.clock``.
    Thread-safe (the clock's own lock); stamps issued inside write transactions grow
    with commit order across every process on the file."""

    def __init__(self, node: str, wall: Callable[[], int]) -> None:
        self._hlc = HybridLogicalClock(node, wall=wall)
        # The last stamp this process wrote as the floor. A floor still equal to it (no
        # other process stamped since, the common case) was issued by this clock, which
        # is therefore at or above it already: no decoding, no observing.
        self._recorded = ""

    def observe_floor(self, tx: SQLiteTx) -> None:
        """Catch up with the greatest stamp any process recorded in the file."""
        row = tx.tuples("get_clock").fetchone()  # hot path: every enqueue's transaction
        if row is not None:
            floor = row[0]
            if floor and floor != self._recorded:  # skipped when it is ours
                self._hlc.observe(HLCTimestamp.decode(floor))

    def now(self) -> HLCTimestamp:
        """The next stamp of this process's clock (above the floor once observed)."""
        return self._hlc.now()

    def next(self) -> str:
        """The next stamp, encoded as it is stored."""
        return self._hlc.now().encode()

    def record(self, tx: SQLiteTx, stamp: str, coalesced: int = 0) -> None:
        """Raise the file's floor to ``stamp`` (one this clock issued), and count the sends
        coalescing saved, in the transaction that issued it, so the stamp and its floor
        commit together."""
        tx.execute("bump_state", {"clock": stamp, "coalesced": coalesced})
        # Even if this transaction rolls back: a floor equal to it is still ours.
        self._recorded = stamp
