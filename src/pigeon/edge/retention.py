"""Retention of delivered operations: how long the edge keeps what it already sent.

A delivered operation stays in the file for a while (``pigeon queue list``, stats, an
app's own reconciliation) and then goes: a queue on a phone must not grow for ever. The
queue purges by itself after a delivery, at most once a minute and a bounded number of
rows at a time, so no delivery waits long behind a purge; a backlog (a device that kept
years of history, or a longer ``keep`` shortened) is worked off one bounded purge after
another. Pending, in-flight, conflict-held and dead operations are never purged.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

from pigeon.checks import is_finite
from pigeon.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pigeon.edge.queue_store import QueueStore

DEFAULT_KEEP_DELIVERED = 7 * 24 * 3600.0  # a week
PURGE_EVERY = 60.0  # seconds between automatic purges of one process
PURGE_BATCH = 1000  # rows per purge transaction


def check_keep(keep: float | None, name: str = "keep_delivered") -> float | None:
    """``keep`` seconds (``None``: keep until ``purge_delivered``); a clear error if bad."""
    if keep is None:
        return None
    if not is_finite(keep):
        raise ConfigurationError(f"{name} must be a number of seconds, not {keep!r}")
    if keep < 0:
        raise ConfigurationError(f"{name} must be >= 0 seconds, not {keep!r}")
    return float(keep)


class PurgeSchedule:
    """When this process purges next: at once the first time (a device back after a long
    time catches up), then every ``every`` seconds, or again at once while a purge came
    back full (more rows are due). Pure: the caller passes the time and the row count."""

    def __init__(self, every: float = PURGE_EVERY, batch: int = PURGE_BATCH) -> None:
        self.every, self.batch = every, batch
        self._next = -math.inf
        self._lock = threading.Lock()

    def claim(self, now: float) -> bool:
        """True if a purge is due now; the caller then runs it and calls ``done``."""
        with self._lock:
            if now < self._next:
                return False
            self._next = now + self.every  # one thread purges; the others go on
            return True

    def done(self, now: float, purged: int) -> None:
        if purged >= self.batch:
            with self._lock:
                self._next = now  # a full batch: more are due


def purge_all(store: QueueStore, before: float, limit: int = PURGE_BATCH) -> int:
    """Everything delivered before ``before``, ``limit`` rows per transaction."""
    total = 0
    while True:
        purged = store.purge_delivered(before, limit)
        total += purged
        if purged < limit:
            return total
