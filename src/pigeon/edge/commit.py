"""Group commit: many threads' writes share one transaction and one fsync.

Leader/follower, no background thread: a caller that finds no commit running becomes the
leader and commits its own item at once, in hand (no ticket, nothing to wait on); callers
that arrive meanwhile queue up and wait. When the leader is done, one waiting caller
becomes the next leader and takes the whole queue that built up during the previous fsync.
A lone thread therefore pays no hand-off at all, and under contention the batch grows by
itself to the number of writers. Every caller returns only after the transaction holding
its own item committed; an item that fails inside the transaction (the commit function
reports it) fails alone.

Late joiners: the commit function is handed ``more()``, which it calls after writing what
it has and before it commits, to take whatever was queued meanwhile into the same
transaction. The writers just released by the previous commit are queuing again while the
leader writes; without this they would wait a whole fsync for the next leader, and batches
would settle at about half the writers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_UNSET = object()


def _held() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass(slots=True)
class _Ticket(Generic[T]):
    """A follower's item while it waits. ``waiter`` is a lock taken at creation and
    released exactly once: by the leader that committed the item, or by the one that
    hands leadership to this ticket. A plain lock costs a fraction of an Event (which
    builds a Condition, and a lock per wait)."""

    item: T
    done: bool = False
    result: object = _UNSET
    error: BaseException | None = None
    waiter: threading.Lock = field(default_factory=_held)


More = Callable[[], Sequence[T]]


class CommitBatcher(Generic[T, R]):
    """``commit(items, more)`` writes a batch in one transaction and returns, per item
    (those given, then those ``more()`` returned, in that order), its result or the
    exception that item alone raised; if ``commit`` itself raises, every item of the batch
    gets that error (the transaction rolled back)."""

    def __init__(
        self,
        commit: Callable[[Sequence[T], More[T]], list[R | BaseException]],
        *,
        max_batch: int = 1000,
    ) -> None:
        self._commit = commit
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Ticket[T]] = []
        self._leading = False
        self.transactions = 0  # batches committed (or failed): for tests and metrics
        self.items = 0

    def submit(self, make: Callable[[], T]) -> R:
        """Queue the item ``make()`` builds (called under the queue lock, so items queue in
        the order they were made) and wait for its commit."""
        ticket: _Ticket[T] | None = None
        with self._lock:
            item = make()
            if self._leading:
                ticket = _Ticket(item)
                self._queue.append(ticket)
            else:
                # Nobody leads, so nobody waits either (a leader that leaves with a queue
                # hands over instead of clearing _leading): lead with our own item, which
                # needs no ticket, no signal and no hand-off.
                self._leading = True
                ticket = None
        outcome: object
        interrupted: BaseException | None = None
        if ticket is None:
            outcome = self._lead([item], [])[0]
        else:
            # Released once: our item is done, or we lead next. An interrupt (Ctrl-C in
            # the main thread) must not end the wait: we may already be the chosen next
            # leader, and leaving would leave every later caller waiting for nobody. It
            # is raised once our item is settled, which takes one commit.
            while True:
                try:
                    ticket.waiter.acquire()
                    break
                except BaseException as exc:
                    interrupted = exc
            if not ticket.done:
                self._lead([], self._take(self._max_batch))  # ours is first in the queue
            outcome = ticket.error if ticket.error is not None else ticket.result
        if interrupted is not None:
            raise interrupted
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    def _take(self, limit: int) -> list[_Ticket[T]]:
        if not self._queue:  # nobody waiting (a racing append is seen by the hand-off)
            return []
        with self._lock:
            taken, self._queue = self._queue[:limit], self._queue[limit:]
        return taken

    def _lead(self, own: list[T], batch: list[_Ticket[T]]) -> list[R | BaseException]:
        """Commit ``own`` items (untracked: the caller's) and ``batch``'s, plus whatever
        queues meanwhile; settle the tickets, hand over, return ``own``'s outcomes."""

        mine = len(own)

        def more() -> list[T]:
            extra = self._take(self._max_batch - mine - len(batch))
            batch.extend(extra)
            return [t.item for t in extra]

        try:
            # Hot path: a lone enqueue leads with its own item and no batch; build nothing
            # for a batch it does not have (no generator, no zip, no slices).
            items = own + [t.item for t in batch] if batch else own
            try:
                outcomes = self._commit(items, more)
            except BaseException as exc:  # the whole transaction rolled back
                outcomes = [exc] * (mine + len(batch))
            self.transactions += 1
            self.items += len(outcomes)
            if batch:
                for ticket, outcome in zip(batch, outcomes[mine:], strict=True):
                    if isinstance(outcome, BaseException):
                        ticket.error = outcome
                    else:
                        ticket.result = outcome
                    ticket.done = True
                return outcomes[:mine]
            return outcomes
        finally:
            with self._lock:
                successor = self._queue[0] if self._queue else None
                self._leading = successor is not None
            for ticket in batch:
                ticket.waiter.release()
            if successor is not None:
                successor.waiter.release()
