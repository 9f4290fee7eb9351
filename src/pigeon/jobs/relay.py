"""The outbox relay: publishes outbox rows to a broker, at least once, and never loses one.

A row is marked published only after the publisher returned, so a relay killed between
the two publishes that row again when it restarts, with the same message id; the Redis
publisher drops such a repeat itself, and any consumer can dedup on the id. Published rows
are purged after the retention window.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pigeon.jobs._db import rowcount
from pigeon.jobs.manager import describe
from pigeon.logs import summary
from pigeon.storage.base import Database

log = logging.getLogger("pigeon.jobs.relay")


@dataclass(frozen=True)
class Message:
    id: str
    topic: str
    payload: Any
    created_at: float


class Publisher(Protocol):
    def publish(self, message: Message) -> None:
        """Deliver or raise. Must be safe to call twice with the same message id."""


class CallablePublisher:
    """Wrap any ``fn(message)``: a webhook call, a log line, a test's list.append."""

    def __init__(self, fn: Callable[[Message], object]) -> None:
        self.fn = fn

    def publish(self, message: Message) -> None:
        self.fn(message)


# XADD only if this message id was never added: the marker and the entry go in together.
_XADD_ONCE = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[1], '*', 'message_id', ARGV[2], 'topic', ARGV[3],
                    'payload', ARGV[4], 'created_at', ARGV[5])
end
return false
"""


class RedisStreamPublisher:
    """One Redis stream per topic (``<prefix><topic>``), deduplicated by message id for
    ``dedup_seconds`` (keep it longer than the outbox retention)."""

    def __init__(
        self, client: Any, *, prefix: str = "pigeon:", dedup_seconds: int = 7 * 86400
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.dedup_seconds = dedup_seconds
        self._script = client.register_script(_XADD_ONCE)

    def publish(self, message: Message) -> None:
        self._script(
            keys=[self.prefix + message.topic, f"{self.prefix}seen:{message.id}"],
            args=[
                self.dedup_seconds,
                message.id,
                message.topic,
                json.dumps(message.payload, sort_keys=True),
                repr(message.created_at),
            ],
        )


class Relay:
    def __init__(
        self,
        db: Database,
        publisher: Publisher,
        *,
        batch: int = 100,
        retention: float = 86400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.publisher = publisher
        self.batch = batch
        self.retention = retention
        self.clock = clock

    def run_once(self) -> int:
        """Publish one batch of pending rows in order; stops at the first failure so
        order is kept. Returns how many were published."""
        with self.db.transaction() as tx:
            rows = tx.fetchall("outbox_pending", {"limit": self.batch})
        published = 0
        for row in rows:
            message = Message(
                row["message_id"], row["topic"], json.loads(row["payload"]), row["created_at"]
            )
            try:
                self.publisher.publish(message)
            except Exception as exc:
                with self.db.transaction() as tx:
                    tx.execute("outbox_mark_error", {"id": row["id"], "error": describe(exc)})
                log.warning("publishing outbox message %s failed: %s", message.id, summary(exc))
                break
            with self.db.transaction() as tx:
                published += rowcount(
                    tx.execute("outbox_mark_published", {"id": row["id"], "now": self.clock()})
                )
        return published

    def purge(self, batch: int = 1000) -> int:
        """Delete published rows past retention, ``batch`` rows per short transaction, so
        a large backlog never holds one long transaction (PostgreSQL deletes in bounded
        batches; SQLite, one writer anyway, deletes what it finds in one go)."""
        before = self.clock() - self.retention
        total = 0
        while True:
            with self.db.transaction() as tx:
                deleted = rowcount(tx.execute("outbox_purge", {"before": before, "limit": batch}))
            total += deleted
            if deleted < batch:
                return total

    def drain(self) -> int:
        total = 0
        while (n := self.run_once()) > 0:
            total += n
        return total

    def run(self, stop: threading.Event, *, interval: float = 0.5) -> None:
        while not stop.is_set():
            try:
                busy = self.run_once() > 0
                self.purge()
            except Exception:
                log.exception("outbox relay pass failed")
                busy = False
            if not busy:
                stop.wait(interval)
