"""When the next sync should start: a pure rule, and a wake-up signal for both modes.

Sync starts on enqueue (while online), connectivity regained, a backoff timer due, and an
explicit flush. The first, second and fourth arrive as `Waker.set()` from any thread; the
third is the timeout the engine sleeps with, computed by `wait_time` from the queue's
earliest due operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from pigeon.logs import failure

T = TypeVar("T")
log = logging.getLogger("pigeon.sync")


def wait_time(
    *,
    now: float,
    next_due: float | None,
    paused: bool,
    online: bool,
    unreachable_until: float,
    idle_recheck: float,
    batch_window: float = 0.0,
) -> float | None:
    """Seconds to sleep before the next cycle, or None to sleep until woken.

    Paused (authorisation needed) or offline: only an event can help, so no timer. Server
    unreachable: not before the reconnect backoff ends. Otherwise until the earliest due
    operation; if that is already due yet the last cycle found nothing to send (its entity
    waits behind an operation in backoff), look again after ``idle_recheck``. A timer
    wakes ``batch_window`` late so that operations due within a few milliseconds of each
    other (a batch that failed together) leave together again.
    """
    if paused or not online:
        return None
    if unreachable_until > now:
        return unreachable_until - now
    if next_due is None:
        return None
    if next_due <= now:
        return idle_recheck
    return next_due - now + batch_window


class Waker:
    """A wake-up flag settable from any thread, awaitable from one asyncio loop."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_event: asyncio.Event | None = None

    def set(self) -> None:
        self._event.set()
        with self._lock:
            loop, event = self._loop, self._async_event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed under us
                loop.call_soon_threadsafe(event.set)

    def clear(self) -> None:
        self._event.clear()
        if self._async_event is not None:
            self._async_event.clear()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)

    def bind(self) -> None:
        """Attach to the running loop (call from it) so `wait_async` can be awaited."""
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._async_event = asyncio.Event()
            if self._event.is_set():
                self._async_event.set()

    def unbind(self) -> None:
        with self._lock:
            self._loop = None
            self._async_event = None

    async def wait_async(self, timeout: float | None) -> bool:
        event = self._async_event
        if event is None:
            raise RuntimeError("Waker.wait_async needs bind() on the running loop first")
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def sleep_async(self, seconds: float, stopping: threading.Event) -> None:
        """Sleep ``seconds`` unless ``stopping`` is set: wake-ups in between are dropped
        (the next step looks at the whole queue anyway). Cleared before the stop check,
        so a stop() that sets the flag after that check still wakes the wait."""
        deadline = time.monotonic() + seconds
        while True:
            self.clear()
            remaining = deadline - time.monotonic()
            if stopping.is_set() or remaining <= 0:
                return
            await self.wait_async(remaining)


class Notices:
    """A count of events that any number of threads can wait for without consuming them.

    The `Waker` is one flag for the one background loop, which clears it before each step.
    Another waiter (a caller of `SyncEngine.drain`) must not clear it, or the loop would
    miss its wake-up, and cannot wait on it either: once set and not cleared, every wait
    returns at once and the waiter spins. Each waiter here remembers the count it saw
    before looking at the queue and sleeps until the count moves past it, so an event
    that came while it looked is never lost, and none is taken from anyone else.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    @property
    def count(self) -> int:
        with self._changed:
            return self._count

    def post(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def nudge(self) -> None:
        """Have waiters look at their ``until`` again, without an event (see wait_past)."""
        with self._changed:
            self._changed.notify_all()

    def wait_past(
        self, seen: int, timeout: float | None, until: Callable[[], bool] | None = None
    ) -> bool:
        """Sleep until the count is no longer ``seen`` or ``until()`` (True; ``until`` is
        looked at again on each `nudge`), or ``timeout`` passes."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._count != seen or (until is not None and until()), timeout
            )


class _Mine(threading.local):
    """Per thread: the cycles it runs, the lanes it is in (class defaults: 0 in a new
    thread, without a lookup that raises and catches inside)."""

    running = 0
    lanes = 0


class Cycles:
    """The sync cycles of one engine in progress, in any thread, for flush and drain to
    wait for; and whether the current thread is doing the engine's work (a lane).

    A waiter waits only for OTHER threads' cycles: its own cannot end while a callback of
    it calls flush. A cycle that took operations posts a notice as it ends; one that took
    nothing only nudges, so that a waiter that saw it on the way sees it end (a notice
    would have a flush that loops on its own empty cycles loop forever)."""

    def __init__(self, notices: Notices) -> None:
        self._notices = notices
        self._lock = threading.Lock()
        self._running = 0
        self._mine = _Mine()

    def begin(self) -> None:
        with self._lock:
            self._running += 1
        self._mine.running += 1

    def end(self, took: bool) -> None:
        self._mine.running -= 1
        with self._lock:
            self._running -= 1
        if took:
            self._notices.post()
        else:
            self._notices.nudge()

    def passed(self) -> None:
        """A pass of a cycle that goes on (its next operations taken) has settled."""
        self._notices.post()

    def busy(self) -> bool:
        """Whether another thread has a cycle on the way. One int read, no lock: it is
        also read under the notices' lock, in `wait`."""
        return self._running - self._mine.running > 0

    def wait(self, seen: int, timeout: float | None, *, busy: bool) -> None:
        """Until a notice past ``seen``, ``timeout``, or (``busy``: a cycle of another
        thread was seen on the way) until no cycle of another thread is on the way."""
        until = (lambda: not self.busy()) if busy else None
        self._notices.wait_past(seen, timeout, until)

    @contextlib.contextmanager
    def lane(self) -> Iterator[None]:
        self._mine.lanes += 1
        try:
            yield
        finally:
            self._mine.lanes -= 1

    @property
    def in_lane(self) -> bool:
        return self._mine.lanes > 0


def within(timeout: float, work: Callable[[], T], *, name: str) -> tuple[bool, T | None]:
    """Run ``work()`` in a daemon thread and wait at most ``timeout`` seconds for it.

    Returns (True, its result), raises what it raised, or (False, None) once ``timeout``
    passes; ``work`` then goes on by itself and what it raises later is logged. This is
    how a caller's deadline is kept while a request is on the wire: no HTTP request can
    be abandoned half-way without losing its reply, but the caller need not wait for it.
    """
    lock = threading.Lock()
    done = threading.Event()
    results: list[T] = []
    errors: list[BaseException] = []
    abandoned = False

    def run() -> None:
        error: BaseException | None = None
        try:
            result = work()
        except BaseException as exc:
            error = exc
        with lock:
            if error is None:
                results.append(result)
            else:
                errors.append(error)
            late = abandoned
        done.set()
        if late and error is not None:
            failure(log, "pigeon sync: %s failed after its caller's timeout", name, exc=error)

    threading.Thread(target=run, name=name, daemon=True).start()
    done.wait(timeout)
    with lock:
        if not results and not errors:
            abandoned = True
            return False, None
    if errors:
        raise errors[0]
    return True, results[0]
