"""Group commit for single-operation requests.

Every single-operation request is its own transaction, and on SQLite every transaction
ends in an fsync while all other writers wait for the one write lock. When requests
arrive together (many devices syncing, or one device sending several at once), the ones
that come in while a transaction is running wait here instead, and go together into the
next one: one thread hand-off and one fsync for the group (``Intake.execute_group``).
A request that arrives alone goes at once, as before; nothing ever waits for company.

Each request still gets exactly its own answer, and only after the transaction holding
its effect has committed.

The groups run on one thread of their own, the ``Writer``; so do a single-writer store's
batches (`pigeon.server.app`). SQLite has one writer anyway, so nothing is lost by it, and
the hand-off is a plain executor hop: anyio's ``run_in_threadpool`` (cancel scopes, a
capacity limiter, context copying that the group does for itself) cost ~250 µs more per
request on a 2-core VM, a fifth of a single request's time (bench/e2e_bench.py, server
alone). Two batches in two threads cost more still: the second one's thread could only
read its body while the first one wrote, and the two threads passing the interpreter's
lock to and fro made each batch of 100 cost ~10% more CPU than one thread taking them in
turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar

from pigeon.server import on_loop
from pigeon.server.intake import Intake, OperationRequest
from pigeon.server.results import OpResult

# A group is one transaction: bounded, so one slow request does not hold up a crowd, and
# (on PostgreSQL) well below the 64 savepoints after which subtransactions get costly.
MAX_GROUP = 32


class _Waiting(NamedTuple):
    """A request waiting for its group."""

    principal: str
    op: OperationRequest
    # The request's own context rides along: the group runs in one thread, and each
    # operation must still see what its request's middleware set (e.g. the device clock).
    context: contextvars.Context
    future: asyncio.Future[OpResult]
    size: int | None  # the body's bytes (None: not known)


T = TypeVar("T")


class Writer:
    """The thread a single-writer store's transactions are handed to (see above); with
    ``threads`` > 1, those a store whose transactions run side by side takes its batches
    on (`pigeon.server.app`'s ``BATCHES_AT_ONCE``)."""

    def __init__(self, threads: int = 1, name: str = "pigeon-writer") -> None:
        # Its idle threads end when this object is collected (ThreadPoolExecutor wakes
        # its workers then), and the store closes those threads' connections.
        self._thread = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._queued = 0  # work started and not yet ended; counted on the event loop

    @property
    def idle(self) -> bool:
        """Has the thread nothing queued or running?"""
        return not self._queued

    def start(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """``work()`` queued for the writer thread (called on the event loop)."""
        running = asyncio.get_running_loop().run_in_executor(self._thread, work)
        self._queued += 1
        running.add_done_callback(self._ended)
        return running

    def _ended(self, _: object) -> None:
        self._queued -= 1

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` on the writer thread, in this task's context. Once started it is
        waited for to its end even if this task is cancelled (shutdown), as anyio waits
        for its worker threads: what it committed is answered, then the cancellation
        raised."""
        running = self.start(functools.partial(contextvars.copy_context().run, work))
        if await finished(running):
            raise asyncio.CancelledError
        return running.result()


async def finished(running: asyncio.Future[T]) -> bool:
    """Wait for ``running`` to end, whatever happens to the waiting task; True when that
    task was cancelled meanwhile (its caller raises the cancellation once done)."""
    cancelled = False
    while not running.done():
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            cancelled = cancelled or not running.cancelled()
        except BaseException:
            pass  # the work's own outcome: the caller reads it from ``running``
    return cancelled


def outcome(work: Callable[[], T]) -> asyncio.Future[T]:
    """``work()`` run here, its result or exception in a future already done."""
    done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    try:
        done.set_result(work())
    except BaseException as exc:  # told to the waiters, as from a thread
        done.set_exception(exc)
    return done


def finish_after_loop(
    writer: Writer, intake: Intake, results: list[OpResult]
) -> asyncio.Future[list[OpResult]]:
    """``intake.finish(results)`` after a commit made on the event loop, the write turn
    let go of: here if it runs only pigeon's code, else on the writer thread, so the
    application's after_commit and replay hooks, of which the loop's bounds know nothing,
    never hold the loop (nor the turn, which they may need for writes of their own)."""
    finish = functools.partial(intake.finish, results)
    if intake.finishes_alone(results):
        return outcome(finish)
    return writer.start(functools.partial(contextvars.copy_context().run, finish))


@contextlib.contextmanager
def turn_on_loop(
    writer: Writer, intake: Intake, ops: Sequence[OperationRequest | OpResult]
) -> Iterator[bool]:
    """True, the store's write turn held for the block, if ``ops`` (already known small)
    may be applied here on the event loop: ``writer`` idle, the operations sure to be
    short, the turn free at once (`pigeon.server.on_loop`); else False."""
    if not (writer.idle and on_loop.short(len(ops), intake.admission.measured(ops))):
        yield False
        return
    with intake.store.turn_at_once() as ours:
        yield ours


class RequestGroups:
    """``await execute(principal, op)``: ``intake.execute`` with group commit."""

    def __init__(
        self, intake: Intake, *, max_group: int = MAX_GROUP, writer: Writer | None = None
    ) -> None:
        if max_group < 1:
            raise ValueError(f"max_group must be at least 1, not {max_group}")
        self.intake = intake
        self.max_group = max_group
        self.writer = writer or Writer()
        self.groups = 0  # transactions used (fewer than requests under load): for tests
        self._waiting: list[_Waiting] = []
        self._draining: asyncio.Task[None] | None = None

    async def execute(
        self, principal: str, op: OperationRequest, *, size: int | None = None
    ) -> OpResult:
        """``size``: the request body's bytes; a group all of whose sizes are known and
        small may run on the event loop (`pigeon.server.on_loop`)."""
        # Admitted before it queues: a duplicate of a request still queued or running is
        # answered 409 now, not after waiting its turn behind the original.
        owner = object()
        refused = await self.intake.admission.admit_async(principal, op, owner)
        if refused is not None:
            return refused
        future: asyncio.Future[OpResult] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _: self.intake.admission.release(principal, op, owner))
        self._waiting.append(_Waiting(principal, op, contextvars.copy_context(), future, size))
        if self._draining is None:
            self._draining = asyncio.create_task(self._drain())
        # Shielded: a client that hangs up does not cancel a group that others share.
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        try:
            while self._waiting:
                group = self._waiting[: self.max_group]
                del self._waiting[: self.max_group]
                items = [(waiting.principal, waiting.op) for waiting in group]
                contexts = [waiting.context for waiting in group]
                running = self._on_loop(items, contexts, group)
                if running is None:
                    run = functools.partial(self.intake.execute_group, items, contexts)
                    running = self.writer.start(run)
                # A group that has started is waited for even if this task is cancelled
                # (shutdown): its requests get what committed, then the cancellation.
                cancelled = await finished(running)
                self._settle(group, running)
                if cancelled:
                    raise asyncio.CancelledError
        finally:
            self._draining = None
            for waiting in self._waiting:  # cancelled (shutdown): nobody will run these
                waiting.future.cancel()
            self._waiting.clear()

    def _on_loop(
        self,
        items: list[tuple[str, OperationRequest]],
        contexts: list[contextvars.Context],
        group: list[_Waiting],
    ) -> asyncio.Future[list[OpResult]] | None:
        """The group committed here on the event loop if it is small and sure to be
        short and nothing else writes (`pigeon.server.on_loop`), and being finished
        (`finish_after_loop`); None otherwise."""
        sizes = [waiting.size for waiting in group]
        known = [size for size in sizes if size is not None]
        if len(known) < len(sizes) or not on_loop.small(sum(known)):
            return None
        with turn_on_loop(self.writer, self.intake, [waiting.op for waiting in group]) as ours:
            if not ours:
                return None
            committed = outcome(functools.partial(self.intake.commit_group, items, contexts))
        if committed.exception() is not None:
            return committed
        return finish_after_loop(self.writer, self.intake, committed.result())

    def _settle(self, group: list[_Waiting], running: asyncio.Future[list[OpResult]]) -> None:
        if running.cancelled():  # the writer was shut down before the group ran
            for waiting in group:
                waiting.future.cancel()
            return
        exc = running.exception()
        if exc is not None:  # not even a 503 could be made: tell each
            for waiting in group:
                if not waiting.future.done():
                    waiting.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise exc
            return
        self.groups += 1
        for waiting, result in zip(group, running.result(), strict=True):
            if not waiting.future.done():
                waiting.future.set_result(result)
