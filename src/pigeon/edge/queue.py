"""``OfflineQueue``: the durable outbox of the edge (docs/design.md, "Edge: queue, sync,
transport").

Operations are kept in a SQLite file (WAL) until a 2xx says the server has them. They
leave in the order they were made; a later operation on an entity never overtakes an
earlier one, and a failing one holds back only its own entity. Concurrent enqueues share
one transaction and one fsync (group commit); each returns once its own row is durable.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal

from pigeon.core.clock import HLCTimestamp
from pigeon.core.ids import uuid7
from pigeon.core.operation import Operation, OpStatus, OpType
from pigeon.edge import retention
from pigeon.edge import validate as v
from pigeon.edge.commit import CommitBatcher
from pigeon.edge.conflicts import ConflictStore
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue_store import Built, NewOp, QueueStore
from pigeon.edge.sqlite import EdgeStore
from pigeon.edge.stats import QueueStats as QueueStats
from pigeon.edge.subscribers import Subscribers
from pigeon.exceptions import ConfigurationError, InvalidOperation, PigeonError
from pigeon.storage.crypto import Keyring, cipher_for

FailureKind = Literal["transient", "permanent", "conflict"]

log = logging.getLogger("pigeon.edge")


class Unsent(enum.Enum):
    """``release()`` without ``retry_after``: the operation never reached the server."""

    NOT_SENT = "not sent"


NOT_SENT = Unsent.NOT_SENT


class OfflineQueue:
    """A durable, ordered, coalescing outbox in one SQLite file.

    Safe for many threads, and for several processes (or queues) on one file (``BEGIN
    IMMEDIATE``, busy timeout). Operations left in flight by a queue that is gone (died,
    or closed) go back to pending, key unchanged: on open, and in ``next_batch`` every
    ``recover_every`` seconds (`pigeon.edge.owners`; never with ``recover=False``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: QueueOptions | None = None,
        *,
        node_id: str | None = None,
        now: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        keys: Keyring | None = None,
    ) -> None:
        """``options``: how the file is kept (`QueueOptions`, checked when made). ``node_id``
        names this device in its operations' clock stamps (default: the file's own).
        ``now`` and ``rng``: the clock and the jitter's randomness (tests set them).
        ``keys``: seal payloads and responses in the file (`pigeon.storage.crypto`)."""
        options = options or QueueOptions()
        self.options = options
        self.keep_delivered = options.keep_delivered
        self._purges = retention.PurgeSchedule()
        self.retry_policy = options.retry_policy
        self.durability = options.durability
        self.max_payload_bytes = options.max_payload_bytes
        self.allowed_types = options.types
        self.coalesce = options.coalesce
        self._now = now
        self._rng = rng or random.Random()
        # The SQLite file (the only store there is); the policy below goes through the
        # QueueStore protocol alone.
        self._store: QueueStore = EdgeStore(
            path,
            durability=options.durability,
            create=options.create,
            recover=options.recover,
            now=now(),
            upgrade=options.upgrade,
            recover_every=options.recover_every,
            cipher=cipher_for(keys),
            coalesce=options.coalesce,
            node_id=node_id,
            wall=lambda: int(self._now() * 1000),
        )
        self.path = self._store.path
        self.node_id: str = self._store.node_id
        # Enqueues of many threads share one transaction: the store's append commits them.
        self._group: CommitBatcher[NewOp, Built] = CommitBatcher(self._store.append)
        self._subscribers = Subscribers()
        self._local = threading.local()  # enqueues inside batch(), told once it commits
        self._conflicts: ConflictStore | None = None

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(
        self,
        type: str | OpType,
        entity: str,
        payload: Any,
        *,
        endpoint: str | None = None,
        method: str | None = None,
        base_version: str | None = None,
    ) -> Operation:
        """Store one operation durably and return it as stored.

        Folded into the entity's unsent tail (see ``pigeon.edge.coalesce``): the returned
        operation is that tail as it now stands (its id and key). A DELETE that cancels an
        unsent CREATE returns an operation with status ``COALESCED`` that was never stored
        (``get`` on its id raises NotFound): nothing about the entity is left to send.
        """
        type_ = v.operation_type(type, self.allowed_types)
        entity = v.entity_name(entity)
        text = v.encode_payload(payload, self.max_payload_bytes)
        endpoint, method = v.route(type_, entity, endpoint, method)
        if base_version is not None:
            base_version = v.version(base_version)
        op_id, key = uuid7(), uuid7()

        def make() -> NewOp:  # stamped later, in the transaction that writes it
            return NewOp(
                id=op_id,
                idempotency_key=key,
                type=type_,
                entity=entity,
                payload=text,
                endpoint=endpoint,
                method=method,
                created_at=self._now(),
                base_version=base_version,
            )

        if self._store.in_batch():  # our own open transaction: join it, do not queue
            outcome = self._store.append([make()], tuple)[0]
            if isinstance(outcome, BaseException):
                raise outcome
            self._local.enqueued = True
            return outcome()
        stored = self._group.submit(make)()  # built here, not under the writer's lock
        self._subscribers.notify()
        return stored

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Group this thread's calls into one transaction and one fsync, e.g. marking a
        whole batch response delivered. Durable, all together, when the block exits; an
        exception out of the block rolls all of it back."""
        return self._batch()

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        if self._store.in_batch():
            yield
            return
        self._local.enqueued = False
        try:
            with self._store.batch():
                yield
        finally:
            enqueued, self._local.enqueued = self._local.enqueued, False
        if enqueued:  # committed: only now may a subscriber see the operations
            self._subscribers.notify()

    # -- subscribers ---------------------------------------------------------------------

    def subscribe(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` after every enqueue has committed (e.g. to wake a sync
        engine). It runs in the enqueuing thread, outside any transaction, so it may use
        the queue; it should be quick. An exception it raises is logged, never raised."""
        self._subscribers.add(callback)

    def unsubscribe(self, callback: Callable[[], object]) -> None:
        """Stop calling ``callback`` (once per time it was subscribed); unknown: no-op."""
        self._subscribers.remove(callback)

    # -- reading -------------------------------------------------------------------------

    @property
    def pending(self) -> list[Operation]:
        """Every live operation (pending, in flight, conflict-held), in queue order; those
        held behind their entity's dead head say so (``held``)."""
        return self._store.live()

    def get(self, op_id: str) -> Operation:
        return self._store.get(op_id)

    def dead_letters(self) -> list[Operation]:
        return self._store.dead()

    def operations(
        self, status: OpStatus | str | None = None, limit: int = 1000
    ) -> list[Operation]:
        """Operations of one status (any status if None), in queue order."""
        value = None if status is None else v.stored_status(status)
        limit = v.count(limit, "limit")
        return self._store.listing(value, limit)

    # -- sending -------------------------------------------------------------------------

    def next_batch(self, n: int = 100) -> list[Operation]:
        """Hand out up to ``n`` due operations, marked IN_FLIGHT, in queue order: the oldest
        due head of each entity, never one behind an earlier undelivered operation, at most
        one in flight per entity. Nothing while the queue is paused (or for ``n`` = 0)."""
        if v.count(n, "n") == 0:
            return []
        # Durable, although IN_FLIGHT itself is volatile (recovery resets it): the same
        # write counts the dispatch, and that count is what forbids folding into or
        # cancelling an operation the server may hold. Lost to an OS crash after the
        # request left, a later edit would be folded under the old key (422, dead letter).
        return self._store.dispatch(n, self._now())

    def mark_delivered(self, op_id: str, *, response: Any = None) -> None:
        """A 2xx came back. Repeating it is harmless."""
        self._store.deliver(op_id, response, self._now())
        self._purge_due()

    def mark_delivered_many(self, items: Sequence[tuple[str, Any, str | None]]) -> None:
        """``mark_delivered`` for ``(op_id, response, etag)``s, all or nothing; an etag
        becomes its entity's base version when this call delivers its operation (a repeat
        of an earlier reply changes nothing)."""
        for _, _, etag in items:  # what set_base_version refuses, refused here too
            if etag is not None:
                v.version(etag, "etag")
        if items:
            self._store.deliver_many(items, self._now())
            self._purge_due()

    def _purge_due(self) -> None:
        """After a delivery (committed): purge what ``keep_delivered`` let go, if due."""
        if self.keep_delivered is None or self._store.in_batch():
            return
        now = self._now()
        if not self._purges.claim(now):
            return
        try:
            before = now - self.keep_delivered
            purged = self._store.purge_delivered(before, self._purges.batch)
        except PigeonError:  # housekeeping: the delivery itself is committed
            log.warning("purging delivered operations of %s failed", self.path, exc_info=True)
            return
        self._purges.done(now, purged)

    def mark_failed(
        self,
        op_id: str,
        error: str,
        *,
        kind: FailureKind = "transient",
        retry_after: float | None = None,
    ) -> Operation:
        """Record a failed attempt. ``transient``: try again after the policy's delay (or
        ``retry_after``), dead-letter once the policy is exhausted; ``permanent``: dead
        letter now; ``conflict``: held for the resolver. A dead letter or a conflict
        holds its entity's later operations (see ``retry_dead``, ``discard``)."""
        if kind not in ("transient", "permanent", "conflict"):
            raise InvalidOperation(
                f"kind must be 'transient', 'permanent' or 'conflict', not {kind!r}"
            )
        if not isinstance(error, str):
            raise InvalidOperation(f"error must be a string describing it, not {error!r}")
        v.text(error, "error")
        if retry_after is not None:
            retry_after = v.seconds(retry_after, "retry_after")
        now = self._now()
        policy = self.retry_policy

        def then(attempts: int, created_at: float) -> float | OpStatus:
            if kind == "permanent":
                return OpStatus.DEAD
            if kind == "conflict":
                return OpStatus.CONFLICT
            if policy.exhausted(attempts, now - created_at):
                return OpStatus.DEAD
            return now + policy.delay(attempts, retry_after=retry_after, rng=self._rng)

        return self._store.fail(op_id, error=error, kind=kind, now=now, then=then)

    def release(self, op_id: str, *, retry_after: float | Unsent | None = NOT_SENT) -> Operation:
        """IN_FLIGHT back to PENDING without spending an attempt.

        Without ``retry_after``: it was not sent (offline, never attempted), so it is due
        at once and, if it was never sent before, may still be folded into or cancelled.

        With ``retry_after`` (409 "key in progress"): the server holds the key and is still
        working on it. That is not a failure, so no attempt is spent, but the operation
        stays marked as sent (never folded into, never cancelled: the server may complete
        it) and is due again ``retry_after`` seconds from now; ``None`` means the server
        named no delay, and the policy's first backoff (``base``) is used."""
        sent = retry_after is not NOT_SENT
        delay = self._release_delay(retry_after)
        return self._store.release(op_id, due=self._now() + delay, sent=sent)

    def _release_delay(self, retry_after: float | Unsent | None) -> float:
        if isinstance(retry_after, Unsent):
            return 0.0
        if retry_after is None:
            return self.retry_policy.backoff(1)
        return max(v.seconds(retry_after, "retry_after"), 0.0)

    # -- repair --------------------------------------------------------------------------

    def retry_dead(self, op_id: str) -> Operation:
        """A dead letter back to pending, attempts reset, same key, in its own place: a
        dead operation stays its entity's head, so what was made after it on the entity
        is held (not sent) until this call, and goes after it."""
        return self._store.resurrect(op_id, self._now())

    def discard(self, op_id: str, *, with_tail: bool = False) -> list[Operation]:
        """Drop a dead letter or a conflict-held operation for good; the operations of
        its entity held behind it go on. ``with_tail``: drop those too (the ones never
        sent: from the first that was, the server may hold it, so it stays and goes).
        Returns the operations dropped with it."""
        return self._store.remove(
            op_id, allowed=(OpStatus.DEAD, OpStatus.CONFLICT), action="discard", tail=with_tail
        )

    def cancel(self, op_id: str) -> None:
        """Withdraw a pending operation that was never handed to a sender."""
        self._store.remove(op_id, allowed=(OpStatus.PENDING,), action="cancel")

    def resolve_conflict(self, op_id: str) -> None:
        """Lift the conflict hold: the operation is due again (same key)."""
        self._store.unhold(op_id, self._now())

    def purge_delivered(self, older_than: float) -> int:
        """Forget operations delivered more than ``older_than`` seconds ago, now (the
        queue also does it by itself, see ``keep_delivered``). Returns how many."""
        seconds = retention.check_keep(older_than, "older_than")
        if seconds is None:
            raise ConfigurationError("older_than must be a number of seconds, not None")
        return retention.purge_all(self._store, self._now() - seconds)

    # -- state ---------------------------------------------------------------------------

    def stats(self) -> QueueStats:
        return self._store.stats(self._now())

    def next_due_at(self) -> float | None:
        """When the next operation is due (the scheduler's timer); at or before ``now``
        means something is due already; None when nothing waits to be sent."""
        return self._store.next_due_at()

    def pause(self, reason: str) -> None:
        """Stop handing out operations (e.g. 401/403: authorisation needed). Persisted."""
        if not isinstance(reason, str) or not reason:
            raise InvalidOperation(f"pause needs a non-empty reason, not {reason!r}")
        v.text(reason, "reason")
        self._store.set_paused(reason)

    def resume(self) -> None:
        self._store.set_paused(None)

    @property
    def paused(self) -> str | None:
        return self._store.paused

    def base_version(self, entity: str) -> str | None:
        return self._store.base_version(entity)

    def set_base_version(self, entity: str, version: str | None) -> None:
        """What enqueue would take as ``base_version`` (None forgets the entity's)."""
        entity = v.entity_name(entity)
        if version is not None:
            version = v.version(version, "version")
        self._store.set_base_version(entity, version)

    @property
    def conflicts(self) -> ConflictStore:
        """This queue's conflict records and base snapshots (`pigeon.edge.conflicts`)."""
        store = self._conflicts
        if store is None:
            store = self._conflicts = ConflictStore(self)
        return store

    @property
    def store(self) -> QueueStore:
        """Where the queue keeps its operations and conflict records (`QueueStore`)."""
        return self._store

    def stamp(self) -> HLCTimestamp:
        """A stamp of the queue's clock, the clock its operations are stamped with (e.g. a
        request's device clock): above every stamp recorded in the file by any process.
        Not recorded itself; the next operation's stamp, or close(), records one above it."""
        return self._store.stamp()

    @property
    def commits(self) -> int:
        """Transactions group commit has used for enqueues (fewer than enqueues under load)."""
        return self._group.transactions

    def close(self) -> None:
        self._store.close()  # records what stamp() lent, if it lent any

    def __enter__(self) -> OfflineQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
