"""The keys this process is applying right now, so a duplicate is answered at once.

A duplicate of a request still running must get ``409`` with ``Retry-After`` promptly,
not wait for the original to finish: on SQLite it would queue behind the original for
the one write lock (or for the group-commit writer), on PostgreSQL behind the original's
uncommitted claim row. Within one process this registry answers without touching the
database; across processes the store bounds its own wait (``IdempotencyStore.claim``).

Admission is checked BEFORE a request queues for a transaction and given up only after
the transaction holding its effect has ended, so a duplicate that is admitted meets the
committed claim (a replay) or none at all (it runs). The registry is no lock: the claim
in the database stays what makes an effect happen once; this only makes waiting short.

Each entry knows when its work started and how long it is expected to take (the route's
recent durations, plus a test hook's declared delay), which is what ``Retry-After`` says.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

Slot = tuple[str, str]  # (principal, idempotency key)

# Weight of the newest duration in a route's running mean: a few recent requests decide.
_ALPHA = 0.2


@dataclass(slots=True)
class Holder:
    """Who holds a key: the request applying it, since when, for how long expected
    (asked only of a holder a duplicate meets: working it out for every operation of a
    batch routed each one a second time)."""

    operation_id: str
    started: float
    expected: Callable[[], float]
    owner: object
    # Made for the first request that waits for this holder (most never meet one): the
    # event a batch's hundred holders each made and set cost it ~4 us an operation.
    done: threading.Event | None = None
    count: int = 1  # the same owner may hold one key twice (a batch naming it twice)

    def retry_after(self, now: float) -> int:
        """Whole seconds until the holder is expected to be done (at least 1)."""
        return max(1, math.ceil(self.started + self.expected() - now))


class InFlight:
    """(principal, key) -> the holder applying it in this process."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self._lock = threading.Lock()
        self._held: dict[Slot, Holder] = {}
        self._durations: dict[str, float] = {}

    def enter(
        self, slot: Slot, owner: object, operation_id: str, expected: Callable[[], float]
    ) -> Holder | None:
        """Hold ``slot`` for ``owner`` (None), or the other holder that has it."""
        return self.enter_all([(slot, operation_id)], owner, expected)[1]

    def enter_all(
        self, slots: Sequence[tuple[Slot, str]], owner: object, expected: Callable[[], float]
    ) -> tuple[int, Holder | None]:
        """``enter`` each (slot, operation id) in order, under one lock, up to the first
        one another owner holds: how many were entered, and that holder (None: all)."""
        now, held = self.now(), self._held
        with self._lock:
            # One loop, no call per slot: a batch enters a hundred keys at a time.
            for n, (slot, operation_id) in enumerate(slots):
                holder = held.get(slot)
                if holder is None:
                    held[slot] = Holder(operation_id, now, expected, owner)
                elif holder.owner is owner:
                    holder.count += 1
                else:
                    if holder.done is None:
                        holder.done = threading.Event()
                    return n, holder
        return len(slots), None

    def admit(
        self,
        slot: Slot,
        owner: object,
        operation_id: str,
        expected: Callable[[], float],
        wait: float,
    ) -> Holder | None:
        """``enter``, waiting up to ``wait`` seconds for another holder to leave first:
        None once held, or the holder still there when the wait ran out."""
        deadline = time.monotonic() + wait
        while True:
            holder = self.enter(slot, owner, operation_id, expected)
            if holder is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0 or holder.done is None or not holder.done.wait(left):
                return holder

    def leave(self, slot: Slot, owner: object) -> None:
        self.leave_all((slot,), owner)

    def leave_all(self, slots: Iterable[Slot], owner: object) -> None:
        """Give up each of ``slots`` that ``owner`` holds, under one lock."""
        held = self._held
        with self._lock:
            for slot in slots:
                holder = held.get(slot)
                if holder is None or holder.owner is not owner:
                    continue
                holder.count -= 1
                if holder.count == 0:
                    del held[slot]
                    if holder.done is not None:
                        holder.done.set()

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    # -- expected durations ------------------------------------------------------------

    def measured(self, route: str) -> float | None:
        """The route's recent mean duration in seconds, None before its first request."""
        return self._durations.get(route)

    def observe(self, route: str, seconds: float) -> None:
        """Fold one measured duration of ``route`` into its running mean."""
        with self._lock:
            mean = self._durations.get(route)
            self._durations[route] = seconds if mean is None else mean + _ALPHA * (seconds - mean)
