"""The outbox relay: publishes outbox rows to a broker, at least once, in order, and never
loses one.

A row is marked published only after the broker confirmed it (the publisher returned),
so a relay killed between the two publishes that row again when it restarts, with the
same message id: Redis (a marker set with the entry, atomically) and NATS JetStream (the
``Nats-Msg-Id`` duplicate window) drop such a repeat themselves; RabbitMQ has no
broker-side dedup, so its consumers see it twice and dedup on ``message_id``.

Rows go out in outbox order (``id``), a batch at a time; the first refused message stops
the pass, only the confirmed prefix is marked, and the relay backs off (capped, jittered:
``pigeon.jobs.backoff``) before it tries that row again, so a broker outage never loses
or reorders rows. Published rows are purged after the retention window.

Publishers implement ``publish(message)``; those that can keep many messages on the wire
(the broker publishers in ``pigeon.jobs.publishers``) also implement ``publish_many``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pigeon import lifecycle
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.manager import describe
from pigeon.jobs.publishers.messages import BatchPublisher, Message, PartialPublish, Publisher
from pigeon.jobs.publishers.redis import RedisStreamPublisher
from pigeon.jobs.rows import OutboxRow
from pigeon.jobs.store import JobStore, OutboxSession
from pigeon.jobs.stores import store_for
from pigeon.logs import failure, summary
from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring
from pigeon.urls import redact_urls

log = logging.getLogger("pigeon.jobs.relay")

# Tests only: the relay SIGKILLs itself once this many messages were confirmed by the
# broker, before it marks them (the crash between publish and mark, made deterministic).
TEST_DIE_AFTER_ENV = "PIGEON_RELAY_TEST_DIE_AFTER"

__all__ = [
    "BatchPublisher",
    "CallablePublisher",
    "Message",
    "PartialPublish",
    "Publisher",
    "RedisStreamPublisher",
    "Relay",
    "RelayRunner",
]


class CallablePublisher:
    """Wrap any ``fn(message)``: a webhook call, a log line, a test's list.append."""

    def __init__(self, fn: Callable[[Message], object]) -> None:
        self.fn = fn

    def publish(self, message: Message) -> None:
        self.fn(message)


@dataclass
class RelayCounts:
    published: int = 0  # rows marked published
    duplicates: int = 0  # re-publications the broker said it dropped
    failures: int = 0  # passes that stopped on a refused message or a broken connection


@dataclass
class Relay:
    db: (
        Database | JobStore[OutboxSession]
    )  # the outbox's rows are read and marked through its jobs store
    publisher: Publisher
    batch: int = 100
    retention: float = 86400.0
    clock: Callable[[], float] = time.time
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.2, cap=30.0))
    counts: RelayCounts = field(default_factory=RelayCounts)

    def __post_init__(self) -> None:
        die_after = os.environ.get(TEST_DIE_AFTER_ENV)
        self._die_after = int(die_after) if die_after else None
        self._confirmed_total = 0
        self.last_error: Exception | None = None
        self.store: JobStore[OutboxSession] = store_for(self.db)

    def run_once(self) -> int:
        """Publish one batch of pending rows in order; stops at the first message the
        broker does not confirm, so order is kept. Returns how many were published;
        ``last_error`` is that failure (None after a pass with none)."""
        self.last_error = None
        with self.store.transaction() as session:
            rows = session.outbox_pending(self.batch)
        if not rows:
            return 0
        messages = [self._message(r) for r in rows]
        if isinstance(self.publisher, BatchPublisher):
            confirmed, error = self._publish_batch(self.publisher, messages)
            self._confirmed(confirmed)
            published = self._mark(rows[:confirmed])
        else:  # one by one, each marked once confirmed (a slow publisher: a webhook, say)
            published = confirmed = 0
            error = None
            for row, message in zip(rows, messages, strict=True):
                try:
                    self.publisher.publish(message)
                except Exception as exc:
                    error = exc
                    break
                confirmed += 1
                self._confirmed(1)
                published += self._mark([row])
        if error is not None:
            self.counts.failures += 1
            self.last_error = error
            failed = rows[confirmed]
            with self.store.transaction() as session:
                # shown on the operations page: no broker password, whatever the client said
                session.mark_outbox_error(failed["id"], redact_urls(describe(error)))
            log.warning(
                "publishing outbox message %s (row %s) failed: %s",
                failed["message_id"],
                failed["id"],
                summary(error),
            )
        return published

    def _message(self, row: OutboxRow) -> Message:
        """The message of an outbox row: its payload read back as ``outbox.add`` wrote it
        (the store has opened it)."""
        payload = json.loads(row["payload"])
        return Message(row["message_id"], row["topic"], payload, row["created_at"], row["id"])

    def _publish_batch(
        self, publisher: BatchPublisher, messages: list[Message]
    ) -> tuple[int, Exception | None]:
        try:
            self.counts.duplicates += publisher.publish_many(messages)
        except PartialPublish as exc:
            self.counts.duplicates += exc.duplicates
            return exc.confirmed, exc.cause if isinstance(exc.cause, Exception) else exc
        except Exception as exc:
            return 0, exc
        return len(messages), None

    def _confirmed(self, n: int) -> None:
        self._confirmed_total += n
        if self._die_after is not None and self._confirmed_total >= self._die_after:
            os.kill(os.getpid(), signal.SIGKILL)  # tests: die between confirm and mark

    def _mark(self, rows: Sequence[OutboxRow]) -> int:
        """Mark ``rows`` published, in one transaction (one round trip on PostgreSQL).
        Each by its id: a range would also take a row that became visible after it was
        read (committed late) and was never published."""
        if not rows:
            return 0
        now = self.clock()
        with self.store.transaction() as session:
            session.mark_published([row["id"] for row in rows], now)
        self.counts.published += len(rows)
        return len(rows)

    def purge(self, batch: int = 1000) -> int:
        """Delete published rows past retention, ``batch`` rows per short transaction, so
        a large backlog never holds one long transaction (PostgreSQL deletes in bounded
        batches; SQLite, one writer anyway, deletes what it finds in one go)."""
        before = self.clock() - self.retention
        total = 0
        while True:
            with self.store.transaction() as session:
                deleted = session.purge_published(before=before, limit=batch)
            total += deleted
            if deleted < batch:
                return total

    def drain(self) -> int:
        """Publish until nothing is pending or the broker refuses (``last_error``)."""
        total = 0
        while (n := self.run_once()) > 0 and self.last_error is None:
            total += n
        return total + (n if self.last_error is not None else 0)

    def run(
        self,
        stop: threading.Event,
        *,
        interval: float = 0.5,
        purge_every: float = 60.0,
        guard: Callable[[], bool] | None = None,
    ) -> None:
        """Publish until ``stop`` is set (or ``guard()``, asked before each pass, says
        this relay may no longer publish): at once while there is a backlog, every
        ``interval`` seconds when idle, and after a failure (broker down, database
        unavailable) after a capped, jittered backoff that grows with each failure in a
        row. Nothing is skipped: the row that failed is the first one tried again."""
        failures = 0
        last_purge = 0.0
        while not stop.is_set():
            if guard is not None and not guard():
                log.warning("outbox relay: lost the relay lock; standing by")
                return
            try:
                busy = self.run_once() > 0
                if self.last_error is not None:
                    raise self.last_error
                failures = 0
                if time.monotonic() - last_purge >= purge_every:
                    self.purge()
                    last_purge = time.monotonic()
            except Exception as exc:
                failures += 1
                delay = max(self.backoff.delay(failures), 0.05)
                log.info(
                    "outbox relay: %s; trying again in %.2f s (failure %d in a row)",
                    summary(exc),
                    delay,
                    failures,
                )
                stop.wait(delay)
                continue
            if not busy:
                stop.wait(interval)


class RelayRunner:
    """A relay on a background thread with its own database connection and publisher:
    what ``pigeon relay``, ``pigeon worker --relay-to`` and ``pigeon serve --relay-to``
    start. It publishes only while it holds the outbox's relay lock
    (``pigeon.jobs.relay_lock``), standing by while another relay holds it. ``stop()``
    ends it after the pass in progress and closes the publisher, the lock and the
    database."""

    def __init__(
        self,
        db_url: str,
        to: str,
        *,
        batch: int = 100,
        interval: float = 0.5,
        standby: float = 2.0,
        open_db: Callable[[str], Database] | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        from pigeon.jobs.publishers import open_publisher
        from pigeon.jobs.stores.relay_lock import relay_lock
        from pigeon.storage.server import open_server_db

        self.publisher = open_publisher(to)  # a bad URL fails here, before any thread
        # The outbox's payloads are sealed under the server's keys when it has them.
        self.db = open_db(db_url) if open_db else open_server_db(db_url, keyring=keyring)
        self.lock = relay_lock(db_url)
        self.relay = Relay(self.db, self.publisher, batch=batch)
        self.interval = interval
        self.standby = standby
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pigeon-relay", daemon=True)
        self._closed = False
        self._inline = False

    def start(self) -> RelayRunner:
        self._thread.start()
        return self

    def _loop(self) -> None:
        waiting = False
        while not self._stop.is_set():
            if not self.lock.acquire():
                if not waiting:
                    log.info("outbox relay: another relay holds the outbox; standing by")
                    waiting = True
                self._stop.wait(self.standby)
                continue
            if waiting:  # WARNING: shown at every command's default level; and counted
                log.warning("outbox relay: took over the relay lock; publishing")
                lifecycle.count_event(self.db, lifecycle.RELAY_LOCK_TAKEOVER)
            waiting = False
            self.relay.run(self._stop, interval=self.interval, guard=self.lock.held)
            self.lock.release()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # run() catches its own; this is a last word, not a loop
            failure(log, "outbox relay stopped", exc=exc)

    def run_forever(self) -> None:
        """Run in the calling thread until ``stop()`` (from a signal handler, say)."""
        self._inline = True
        try:
            self._loop()
        finally:
            self._close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the pass in progress; closes the publisher, the lock and the
        database (by ``run_forever`` itself when it runs in the calling thread)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._inline:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        close = getattr(self.publisher, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:
                failure(log, "closing the relay's publisher", exc=exc)
        self.lock.release()
        self.db.close()
