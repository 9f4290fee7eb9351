"""Waking idle workers: plain polling, or LISTEN/NOTIFY where the jobs store has it
(``JobStore.wakeup``; the PostgreSQL store's ``ListenWakeup``).

Each queue has a generation number. A worker thread notes it before a claim that comes back
empty, then waits for it to move (or for its poll interval): a notification that arrives
between the empty claim and the wait still wakes it, because the number already moved.

On PostgreSQL one listener thread per worker process holds the database's dedicated
autocommit connection (outside the pool) and ``LISTEN``\\s on the channel of every queue
it serves; inserting a queued job notifies that channel at commit (a trigger of the jobs
table). If the connection drops, the listener reconnects with backoff and wakes every
queue once, since notifications sent meanwhile are lost; polling covers the gap and also
finds delayed jobs and expired leases, which nobody announces.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

CHANNEL_PREFIX = "pigeon_jobs:"


def channel(queue: str) -> str:
    """The NOTIFY channel of a queue; the SQL function ``pigeon_jobs_channel`` agrees."""
    if len(queue.encode()) <= 51:  # 12-byte prefix + 51 <= 63, PostgreSQL's identifier limit
        return CHANNEL_PREFIX + queue
    return CHANNEL_PREFIX + hashlib.md5(queue.encode()).hexdigest()


class Wakeup:
    """Generation counters per queue; waiting threads sleep until one moves or time runs out."""

    def __init__(self, queues: Iterable[str]) -> None:
        self._cond = threading.Condition()
        self._generation = dict.fromkeys(queues, 0)

    def generation(self, queue: str) -> int:
        with self._cond:
            return self._generation[queue]

    def wake(self, queue: str) -> None:
        with self._cond:
            self._generation[queue] += 1
            self._cond.notify_all()

    def wake_all(self) -> None:
        with self._cond:
            for queue in self._generation:
                self._generation[queue] += 1
            self._cond.notify_all()

    def wait(self, queue: str, seen: int, timeout: float) -> bool:
        """Sleep until ``queue``'s generation differs from ``seen``; True if it did."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation[queue] != seen, timeout)

    def start(self) -> None:
        """Polling needs no background work."""

    def close(self) -> None:
        self.wake_all()
