"""What a worker claims: only what its free threads can start now.

A queue's claim threads share one local buffer. A thread with nothing to run claims for
the free threads of its queue (its own included) at most ``prefetch`` jobs each, less
what the buffer already holds, and never more than ``batch`` in one round trip: it starts
the first itself and leaves the rest in the buffer for the others, whom it wakes. A
busy thread never has jobs claimed for it, so no job sits leased behind a running one
while the queue looks empty (with ``prefetch`` > 1 some do, deliberately: they are
claimed, not started, and every figure still counts them as waiting).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from pigeon.jobs.job import Job


def claim_size(*, batch: int, prefetch: int, free: int, buffered: int) -> int:
    """Jobs one claim may take: what the ``free`` threads can start (``prefetch`` each)
    less the ``buffered`` ones already claimed for them, at most ``batch``; never < 0."""
    return max(0, min(batch, free * prefetch - buffered))


class Prefetched:
    """One queue's claimed, not yet started jobs, in due order (thread-safe)."""

    def __init__(self) -> None:
        self._jobs: deque[Job] = deque()
        self._lock = threading.Lock()
        # One claim at a time per queue: each counts the free threads and the buffer once,
        # so two threads claiming together never claim twice for the same free threads.
        self.claiming = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def put(self, jobs: Iterable[Job]) -> None:
        with self._lock:
            self._jobs.extend(jobs)

    def take(self) -> Job | None:
        with self._lock:
            return self._jobs.popleft() if self._jobs else None

    def drain(self) -> list[Job]:
        with self._lock:
            jobs = list(self._jobs)
            self._jobs.clear()
            return jobs
