"""The executor: one pass of "take a batch, send it in order, record what came back".

Every operation the queue hands out leaves this pass in exactly one recorded state:
delivered, rescheduled (attempt spent), held as a conflict, dead, or released back to
pending with no attempt spent (not attempted, never sent, authorisation needed, or its
batch request refused as a whole: the last two pause the queue). The
release of whatever was not settled sits in a ``finally``, so not even a bug in a callback
or the transport strands an operation IN_FLIGHT.

Per-entity order is the queue's: ``next_batch`` hands out at most one operation per entity
and never one that would overtake an earlier one, so everything in a batch is independent
and a failure holds back only its own entity's tail: a dead operation stays its entity's
head, holding the rest until it is retried or discarded (or ``on_dead`` says otherwise,
`DeadTail`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from pigeon.core.clock import HLCTimestamp
from pigeon.core.operation import Operation, OpStatus, OpType
from pigeon.core.retry import RetryPolicy
from pigeon.edge.conflicts import ConflictStore, QueueWrites
from pigeon.edge.queue import Unsent
from pigeon.exceptions import InvalidState, NotFound, NotSent
from pigeon.protocol.transport import Exchange, Reply, Transport
from pigeon.sync.classify import (
    ReplyKind,
    ReplyOutcome,
    classify,
    delivered_outcome,
    delivers,
    version_of,
)
from pigeon.sync.events import CycleReport, DeadTail, EventName, SyncCallbacks

Clock = Callable[[], float]
log = logging.getLogger("pigeon.sync")
_VERSIONED = frozenset({OpType.UPDATE, OpType.DELETE})  # sent with the entity's If-Match


Delivery = tuple[str, Any, str | None]  # (op_id, response, etag) for mark_delivered_many
# A reply that delivered its operation, with the version its ETag names.
_Delivered = tuple[Operation, Reply, str | None]


# No bound on the batches on the way: the default of a pass run on its own.
_ANY_TIME: contextlib.AbstractContextManager[object] = contextlib.nullcontext()


class SyncQueue(QueueWrites, Protocol):
    """Everything `SyncEngine`, its `Executor` and its conflict handling call on a queue:
    `pigeon.edge.queue.OfflineQueue` is the one implementation (a test's subclass of it
    may override any of these)."""

    @property
    def retry_policy(self) -> RetryPolicy:
        """Turns a server's Retry-After into a wait (`RetryPolicy.honour`)."""
        ...

    @property
    def paused(self) -> str | None: ...

    @property
    def conflicts(self) -> ConflictStore:
        """The queue's conflict records and base snapshots."""
        ...

    def get(self, op_id: str) -> Operation: ...

    def next_batch(self, n: int = 100) -> list[Operation]: ...

    def mark_delivered(self, op_id: str, *, response: Any = None) -> None: ...

    def mark_delivered_many(self, items: Sequence[Delivery]) -> None: ...

    def mark_failed(
        self,
        op_id: str,
        error: str,
        *,
        kind: Literal["transient", "permanent", "conflict"] = "transient",
        retry_after: float | None = None,
    ) -> Operation: ...

    def release(self, op_id: str, *, retry_after: float | Unsent | None = ...) -> Operation:
        """Without ``retry_after``: never sent, due at once. With it (None: the policy's
        first backoff): sent, the server holds the key, due again after the wait."""
        ...

    def next_due_at(self) -> float | None: ...

    def pause(self, reason: str) -> None: ...

    def resume(self) -> None: ...

    def base_version(self, entity: str) -> str | None: ...

    def resolve_conflict(self, op_id: str) -> None: ...

    def stamp(self) -> HLCTimestamp:
        """A stamp of the queue's clock (a request's device clock header)."""
        ...

    def subscribe(self, callback: Callable[[], object]) -> None: ...

    def unsubscribe(self, callback: Callable[[], object]) -> None: ...


class _Pass(threading.local):
    """This thread's pass: its events, held until its settling commits (None outside)."""

    deferred: list[tuple[EventName, tuple[Any, ...]]] | None = None


class Executor:
    def __init__(
        self,
        queue: SyncQueue,
        transport: Transport,
        callbacks: SyncCallbacks | None = None,
        *,
        clock: Clock = time.time,
    ) -> None:
        self.queue = queue
        self.transport = transport
        self.callbacks = callbacks or SyncCallbacks()
        self.clock = clock
        # Events of the pass in progress, held until its commit. Per thread: an engine
        # with a pipeline runs several passes at once.
        self._local = _Pass()

    def run_once(
        self, limit: int, *, wire: contextlib.AbstractContextManager[object] = _ANY_TIME
    ) -> CycleReport:
        """One pass: take up to ``limit`` due operations, send them (once ``wire``, the
        engine's count of batches on the way, lets this one go: by default at once) and
        settle the replies."""
        return self.run_pass(limit, wire=wire)[0]

    def run_pass(
        self,
        limit: int,
        *,
        wire: contextlib.AbstractContextManager[object] = _ANY_TIME,
        taken: list[Operation] | None = None,
        then_take: Callable[[CycleReport], bool] | None = None,
    ) -> tuple[CycleReport, list[Operation] | None]:
        """`run_once` over ``taken`` (operations an earlier pass took for this one), or
        over up to ``limit`` taken now. With ``then_take``: once every reply is settled,
        with no event to tell and ``then_take(report)`` true, the next pass's operations
        are taken in the settling's own transaction (one fsync for both, where a lane
        paid two) and returned, for the caller to send (``taken=``) or `release_taken`.
        Not with events to tell: their callbacks may flush, which must not find
        operations taken and not on their way."""
        ops = self.queue.next_batch(limit) if taken is None else taken
        report = CycleReport(taken=len(ops))
        if not ops:
            return report, None
        settled: set[str] = set()
        # Until the exchange is read, any of these may have reached the server: if we fail
        # before settling them they are released as *sent* (never folded into or cancelled,
        # whose old key the server may hold). Those the server reports as not attempted are
        # released as unsent.
        maybe_sent = False
        transmitted: set[str] = set()
        following: list[Operation] | None = None
        try:
            self._fill_base_versions(ops)
            with wire:
                maybe_sent = True
                exchange = self.transport.send(ops, keep_going=self._keep_going)
            transmitted = exchange.transmitted
            # SyncCallbacks wait for the commit: an application told "delivered" must never
            # hear it again because the settling transaction failed and the op was resent.
            self._local.deferred = []
            done, following = self._settled(exchange, len(ops), report, limit, then_take)
            settled |= done
            maybe_sent = False
            events, self._local.deferred = self._local.deferred or [], None
            for name, args in events:
                self._fire(name, args)
        finally:
            self._local.deferred = None
            try:
                self._release(ops, settled, report, sent=maybe_sent, transmitted=transmitted)
            except BaseException:
                self.release_taken(following or [])
                raise
        return report, following

    def _settled(
        self,
        exchange: Exchange,
        sent: int,
        report: CycleReport,
        limit: int,
        then_take: Callable[[CycleReport], bool] | None,
    ) -> tuple[set[str], list[Operation] | None]:
        """Settle ``exchange``'s replies (of ``sent`` operations) in one transaction, and
        take the next pass's operations in it (`run_pass`): the ids settled, and those
        taken once committed (a rollback took nothing)."""
        now = self.clock()
        # One failed batch request: its operations retry together, as one batch again.
        shared_retry_at: dict[int, float] = {}
        done: set[str] = set()
        # One transaction (one fsync) for the whole reply: settling a batch of 100 must
        # not cost 100 commits. If settling fails part-way, nothing of it is kept and
        # every operation is released, to be resent with its key (and replayed).
        # Deliveries are written in runs (one statement per table for a run, not two or
        # three per operation); a run is flushed before any other outcome is settled,
        # so writes and callbacks keep the reply's order.
        delivered: list[_Delivered] = []
        took: list[Operation] | None = None
        with self.queue.batch():
            for op, reply in exchange.replies:
                if delivers(reply.status, reply.error):  # classify's DELIVERED, without
                    # an outcome object per operation unless a callback is to get one
                    delivered.append((op, reply, version_of(reply.headers or {})))
                else:
                    outcome = classify(
                        reply.status, reply.headers, reply.body, reply.error, now=now
                    )
                    self._deliver(delivered, report)
                    self._settle(op, reply, outcome, report, shared_retry_at, now)
                done.add(op.id)
            self._deliver(delivered, report)
            if then_take and len(done) == sent and not self._local.deferred:
                took = self.queue.next_batch(limit) if then_take(report) else None
        return done, took or None

    def release_taken(self, ops: Sequence[Operation]) -> None:
        """Operations a pass took for the next (`run_pass`), back to pending unsent: that
        pass is not run (the engine stops, pauses, is held off, or its time is up)."""
        for op in ops:
            self.queue.release(op.id)

    def _emit(self, name: EventName, *args: Any) -> None:
        deferred = self._local.deferred
        if deferred is not None:
            deferred.append((name, args))
        else:
            self._fire(name, args)

    def _fire(self, name: EventName, args: tuple[Any, ...]) -> None:
        answer = self.callbacks.emit(name, *args)
        if name == "on_dead":
            self._dead_tail(args[0], answer)

    def _dead_tail(self, op: Operation, answer: Any) -> None:
        """Do what ``on_dead`` answered for the dead ``op``'s entity (`DeadTail`)."""
        if answer is None:
            return
        try:
            tail = DeadTail(answer)
        except (ValueError, TypeError):
            log.warning("on_dead returned %r, not a DeadTail: %s stays held", answer, op.entity)
            return
        if tail is DeadTail.HOLD:
            return
        try:
            self.queue.discard(op.id, with_tail=tail is DeadTail.DISCARD)
        except (InvalidState, NotFound):  # retried or discarded meanwhile (the CLI)
            log.info("on_dead's %s for %s: it is no longer dead", tail.value, op.id)

    def _fill_base_versions(self, ops: Sequence[Operation]) -> None:
        """An update or delete made without a base version is sent against the version of
        its entity known NOW, not when it was made: the entity's earlier operations,
        delivered meanwhile, moved it on (a stale If-Match would make it conflict with
        itself). Only those two (docs/design.md, "Wire protocol"): an app-defined operation (a
        comment on a note, a "like") does not replace the entity, so a version check it
        did not ask for would fail it with 412 whenever anyone else touched the entity.
        One made with an explicit base version keeps it: the app asked for the check."""
        for op in ops:
            if op.base_version is None and op.type in _VERSIONED:
                op.base_version = self.queue.base_version(op.entity)

    def _keep_going(self, reply: Reply) -> bool:
        if delivers(reply.status, reply.error):  # asked for every operation of a batch
            return True
        outcome = classify(reply.status, reply.headers, reply.body, reply.error, now=self.clock())
        if outcome.status == 429:
            return False  # "too many requests": sending the rest now only earns more 429s
        return outcome.sent and outcome.kind not in (ReplyKind.AUTH, ReplyKind.REFUSED)

    def _release(
        self,
        ops: Sequence[Operation],
        settled: set[str],
        report: CycleReport,
        *,
        sent: bool,
        transmitted: set[str],
    ) -> None:
        """Back to pending, no attempt spent: as *sent* when a request that carried the
        operation went out (a batch reply that stopped before it does not prove that no
        copy of the request applied it), else as unsent."""
        for op in ops:
            if op.id not in settled:
                if sent or op.id in transmitted:
                    self._release_sent(op.id)
                else:
                    self.queue.release(op.id)
                report.released += 1

    def _deliver(self, run: list[_Delivered], report: CycleReport) -> None:
        """Settle a run of delivering replies with one ``mark_delivered_many``."""
        if not run:
            return
        self.queue.mark_delivered_many(
            [
                (op.id, {"status": reply.status, "body": reply.body, "etag": version}, version)
                for op, reply, version in run
            ]
        )
        report.delivered += len(run)
        report.replayed += sum(reply.replayed for _, reply, _ in run)
        # Nothing to tell without a callback: no event per operation held until the commit.
        if self.callbacks.on_delivered is not None:
            for op, reply, version in run:
                assert reply.status is not None
                self._emit("on_delivered", op, delivered_outcome(reply.status, version, reply.body))
        run.clear()

    def _honour(self, attempts: int, retry_after: float | None) -> float | None:
        """A server's Retry-After as the wait, except 0, which leaves it to the policy's
        backoff (see `RetryPolicy.honour`). None: the queue's policy decides alone."""
        if retry_after is None:
            return None
        return self.queue.retry_policy.honour(attempts, retry_after)

    def _release_sent(self, op_id: str) -> None:
        self.queue.release(op_id, retry_after=0.0)

    def _settle(
        self,
        op: Operation,
        reply: Reply,
        outcome: ReplyOutcome,
        report: CycleReport,
        shared_retry_at: dict[int, float],
        now: float,
    ) -> None:
        # Never DELIVERED: run_once settles the replies that deliver in runs (_deliver).
        kind = outcome.kind
        if kind is ReplyKind.AUTH or kind is ReplyKind.REFUSED:
            if kind is ReplyKind.AUTH or (outcome.status is not None and outcome.status < 400):
                # The request reached the server (which may store a 403 under the key, or
                # have applied it before its redirect, as a 303 after a POST says): keep
                # it marked sent, so no later edit folds into it.
                self._release_sent(op.id)
            else:
                # Refused before any operation was looked at (no batch route, a batch it
                # cannot read): this request sent none of them. No attempt is spent.
                self.queue.release(op.id)
            report.released += 1
            if report.paused is None:
                report.paused = outcome.reason
                self.queue.pause(outcome.reason)
                self._emit("on_paused", outcome.reason)
            return
        if not outcome.sent:
            self.queue.release(op.id)
            report.released += 1
            if isinstance(reply.error, NotSent):
                report.error = reply.error
            else:
                report.unreachable = True
            return
        if kind is ReplyKind.KEY_IN_PROGRESS:
            # No attempt is spent here, so "Retry-After: 0" taken literally would resend
            # at once, again and again, while the server works: 0 is the first backoff's
            # draw instead.
            wait = self._honour(1, outcome.retry_after)
            self.queue.release(op.id, retry_after=wait)
            report.failed += 1
            self._emit("on_failed", op, outcome)
            return
        retry_after = self._honour(op.attempts + 1, outcome.retry_after)
        if reply.shared and id(reply) in shared_retry_at:
            # The same moment as the first of the batch, not the same delay from now: each
            # mark_failed reads the clock anew (a loaded machine spread them apart), and
            # each would draw its own jitter.
            retry_after = max(0.0, shared_retry_at[id(reply)] - self.clock())
        updated = self.queue.mark_failed(
            op.id, outcome.reason, kind=outcome.failure_kind, retry_after=retry_after
        )
        if outcome.status == 429:
            # About this client's rate, not this operation: the whole queue holds off
            # until the operation's own retry (or the server's wait, if it is dead).
            alive = updated.status is OpStatus.PENDING
            until = updated.next_attempt_at if alive else now + (retry_after or 0.0)
            report.throttled_until = max(report.throttled_until or 0.0, until)
        if updated.status is OpStatus.DEAD:
            report.dead += 1
            self._emit("on_dead", updated, outcome)
        elif updated.status is OpStatus.CONFLICT:
            report.conflicts += 1
            self._emit("on_conflict", updated, outcome)
        else:
            report.failed += 1
            if reply.shared:
                shared_retry_at.setdefault(id(reply), updated.next_attempt_at)
            self._emit("on_failed", updated, outcome)
