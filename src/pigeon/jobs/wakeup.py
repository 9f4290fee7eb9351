"""Waking idle workers: LISTEN/NOTIFY on PostgreSQL, plain polling elsewhere.

Each queue has a generation number. A worker thread notes it before a claim that comes back
empty, then waits for it to move (or for its poll interval): a notification that arrives
between the empty claim and the wait still wakes it, because the number already moved.

On PostgreSQL one listener thread per worker process holds its own autocommit connection
(outside the pool) and ``LISTEN``\\s on the channel of every queue it serves; inserting a
queued job notifies that channel at commit (a trigger of the jobs table). If the connection
drops, the listener reconnects with backoff and wakes every queue once, since notifications
sent meanwhile are lost; polling covers the gap and also finds delayed jobs and expired
leases, which nobody announces.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterable

from pigeon.logs import summary
from pigeon.storage.base import Database

log = logging.getLogger("pigeon.jobs.wakeup")

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


class ListenWakeup(Wakeup):
    """``LISTEN`` on the queues' channels from a thread with its own connection."""

    def __init__(self, url: str, queues: Iterable[str], *, connect_timeout: int = 5) -> None:
        names = list(queues)
        super().__init__(names)
        self.url = url
        self.connect_timeout = connect_timeout
        self._by_channel = {channel(q): q for q in names}
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()
        self.connects = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pigeon-listen", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        super().close()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        import psycopg  # only on PostgreSQL
        from psycopg import sql

        backoff = 0.05
        while not self._closed.is_set():
            try:
                with psycopg.connect(
                    self.url, autocommit=True, connect_timeout=self.connect_timeout
                ) as conn:
                    for name in self._by_channel:
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                    self.connects += 1
                    self.listening.set()
                    backoff = 0.05
                    # Anything announced while we were not listening is lost: poll once.
                    self.wake_all()
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            queue = self._by_channel.get(note.channel)
                            if queue is not None:
                                self.wake(queue)
            except psycopg.Error as exc:
                self.listening.clear()
                if not self._closed.is_set():
                    log.warning("LISTEN connection lost (%s); reconnecting", summary(exc))
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        self.listening.clear()


def for_database(db: Database, queues: Iterable[str]) -> Wakeup:
    url = getattr(db, "url", None)
    if db.backend == "postgres" and isinstance(url, str):
        return ListenWakeup(url, queues)
    return Wakeup(queues)
