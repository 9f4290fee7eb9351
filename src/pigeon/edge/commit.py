"""Group commit: many threads' writes share one transaction and one fsync.

Leader/follower, no background thread: a caller that finds no commit running becomes the
leader and commits everything queued so far, its own item included; callers that arrive
meanwhile queue up and wait. When the leader is done, one waiting caller becomes the next
leader and takes the whole queue that built up during the previous fsync. A lone thread
therefore pays no hand-off at all, and under contention the batch grows by itself to the
number of writers. Every caller returns only after the transaction holding its own item
committed; an item that fails inside the transaction (the commit function reports it)
fails alone.

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


@dataclass(slots=True)
class _Ticket(Generic[T]):
    item: T
    done: bool = False
    result: object = _UNSET
    error: BaseException | None = None
    waiter: threading.Event = field(default_factory=threading.Event)


More = Callable[[], Sequence[T]]


class GroupCommit(Generic[T, R]):
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
        """Queue the item ``make()`` builds (called under the queue lock, so whatever it
        stamps, such as a clock, follows queue order) and wait for its commit."""
        with self._lock:
            ticket = _Ticket(make())
            self._queue.append(ticket)
            lead = not self._leading
            if lead:
                self._leading = True
        while not self._finished(ticket):
            if lead:
                self._lead()
                continue
            ticket.waiter.wait()
            ticket.waiter.clear()
            lead = True  # woken: either our item is done or we are the next leader
        if ticket.error is not None:
            raise ticket.error
        return ticket.result  # type: ignore[return-value]

    @staticmethod
    def _finished(ticket: _Ticket[T]) -> bool:
        return ticket.done

    def _take(self, limit: int) -> list[_Ticket[T]]:
        with self._lock:
            taken, self._queue = self._queue[:limit], self._queue[limit:]
        return taken

    def _lead(self) -> None:
        batch = self._take(self._max_batch)

        def more() -> list[T]:
            extra = self._take(self._max_batch - len(batch))
            batch.extend(extra)
            return [t.item for t in extra]

        try:
            try:
                outcomes = self._commit([t.item for t in batch], more)
            except BaseException as exc:  # the whole transaction rolled back
                outcomes = [exc] * len(batch)
            self.transactions += 1
            self.items += len(batch)
            for ticket, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    ticket.error = outcome
                else:
                    ticket.result = outcome
                ticket.done = True
        finally:
            with self._lock:
                successor = self._queue[0] if self._queue else None
                self._leading = successor is not None
            for ticket in batch:
                ticket.waiter.set()
            if successor is not None:
                successor.waiter.set()
