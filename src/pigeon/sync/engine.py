"""`SyncEngine`: the edge's scheduler and executor, in a background thread or asyncio task.

    engine = SyncEngine(queue, HttpTransport("https://api.example"), SyncOptions(pipeline=2),
                        callbacks=SyncCallbacks(on_dead=alert))
    engine.start()                        # or: task = asyncio.create_task(engine.run())
    engine.enqueue("update", "note:42", {"text": "hi"}, endpoint="/notes/42")
    engine.flush(timeout=5)               # "sync now" and wait for it

How the engine learns about new operations: call ``engine.enqueue(...)``, which stores
the operation through ``queue.enqueue`` (the caller waits for the local commit and
nothing else) and then wakes the engine; or enqueue on the queue directly and call
``engine.notify()``. If the queue offers ``subscribe(callback)`` for enqueues, the engine
subscribes itself and plain ``queue.enqueue`` wakes it too. Waking is setting a flag: it
never waits for a sync in progress, and the executor holds no database transaction while
a request is on the wire, so enqueue is never blocked by a slow server.

The asyncio mode runs each cycle in a worker thread (``asyncio.to_thread``): the queue is
blocking SQLite and the transport a blocking httpx client, so the event loop only ever
waits on the wake-up flag and never on I/O.

The background loop never dies of an exception: a step that raises (a full disk, a bug in
a transport or a custom queue) is logged, kept as ``last_error``, passed to ``on_error``,
and followed by a capped, jittered backoff (the ``reconnect`` policy) before the next
step. Operations of a cycle that raised are released by the executor, never stranded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from typing import Any

from pigeon.core.operation import Operation, OpType
from pigeon.logs import failure
from pigeon.protocol.transport import Transport
from pigeon.sync.connectivity import ConnectivityMonitor, ProbeMonitor
from pigeon.sync.events import (
    SyncCallbacks,
    chain,
)
from pigeon.sync.executor import Clock, Executor, SyncQueue
from pigeon.sync.holds import Holds
from pigeon.sync.lanes import Lanes
from pigeon.sync.options import SyncOptions
from pigeon.sync.resolver import ConflictResolver, Sweep
from pigeon.sync.scheduler import Cycles, Notices, Waker, wait_time, within

log = logging.getLogger("pigeon.sync")


class SyncEngine:
    """Deliver a queue's operations through a transport, in order, whenever possible.

    ``options``: batch size, pipeline, backoffs (`SyncOptions`, checked when made).
    ``callbacks``: what the application is told of each transition (`SyncCallbacks`).
    ``connectivity`` defaults to a `ProbeMonitor` over ``transport.probe``. ``resolver``
    settles version conflicts (without one they are held for the user). ``clock``: the
    time, as the queue's (tests set it).
    """

    def __init__(
        self,
        queue: SyncQueue,
        transport: Transport,
        options: SyncOptions | None = None,
        *,
        callbacks: SyncCallbacks | None = None,
        connectivity: ConnectivityMonitor | None = None,
        resolver: ConflictResolver | None = None,
        clock: Clock = time.time,
    ) -> None:
        callbacks = callbacks or SyncCallbacks()
        options = options or SyncOptions()
        self.options = options
        self.queue = queue
        self.transport = transport
        self.cycle_size = options.cycle_size
        self.pipeline = options.pipeline
        on_delivered, on_conflict = callbacks.on_delivered, callbacks.on_conflict
        if resolver is not None:  # it sees every delivery and conflict before the app does
            on_delivered = chain(resolver.on_delivered, on_delivered, self._error)
        # Without one, a conflict is held for the user, with a record (`pigeon conflicts`).
        self._sweeper = Sweep.of(queue, resolver)
        on_conflict = chain(self._sweeper.conflicts.on_conflict, on_conflict, self._error)
        self.resolver = resolver
        self.callbacks = dataclasses.replace(
            callbacks, on_delivered=on_delivered, on_conflict=on_conflict
        )
        self.executor = Executor(queue, transport, self.callbacks, clock=clock)
        self.connectivity: ConnectivityMonitor = connectivity or ProbeMonitor(transport.probe)
        # The latest exception the engine survived (see `SyncCallbacks.on_error`); None until
        # one happens. Never cleared: compare identities to notice a new one.
        self.last_error: BaseException | None = None
        self._error_streak = 0  # steps of the loop that raised in a row
        self._reconnect = options.reconnect  # also after a step of the loop raised
        self._idle_recheck = options.idle_recheck
        self._batch_window = options.batch_window
        self._clock = clock
        self._waker = Waker()  # the background loop's wake-up flag
        self._notices = Notices()  # the same wake-ups, for drain (which must not clear it)
        self._cycles = Cycles(self._notices)  # on the way, for flush and drain to wait for
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._holds = Holds(options.reconnect, clock)  # an unreachable server's, a 429's
        self._lanes = Lanes(
            queue,
            self.executor,
            cycle_size=options.cycle_size,
            pipeline=options.pipeline,
            connectivity=self.connectivity,
            holds=self._holds,
            cycles=self._cycles,
            sweeper=self._sweeper,
            stopping=self._stopping,
            clock=clock,
            on_error=self._error,
        )
        self.totals = self._lanes.totals  # everything done so far (counters only)
        self._attached = False
        self._attach()

    # -- what the application calls ---------------------------------------------------

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
        """``queue.enqueue(...)`` (same arguments), then wake the engine."""
        op = self.queue.enqueue(
            type, entity, payload, endpoint=endpoint, method=method, base_version=base_version
        )
        self.notify()
        return op

    def notify(self) -> None:
        """Something changed (new operation, app event): look at the queue soon. Never blocks."""
        self._waker.set()
        self._notices.post()

    def set_online(self, online: bool) -> None:
        self.connectivity.set_online(online)
        self.notify()

    @property
    def online(self) -> bool:
        return self.connectivity.online

    @property
    def paused(self) -> str | None:
        return self.queue.paused

    def resume(self) -> None:
        """Authorisation fixed (e.g. a new token), or the server that refused our batch
        requests: unpause the queue and sync."""
        self.queue.resume()
        self.notify()

    def flush(self, timeout: float | None = None) -> bool:
        """Sync now until nothing is due (True), or give up (False) when ``timeout``
        passes, the queue is paused, the server cannot be reached, or it asked this client
        to hold off (429: until its wait ends, not even a flush sends anything).

        Without a timeout it syncs in the calling thread. With one, in a worker thread,
        so that a request on the wire when ``timeout`` passes does not hold the caller
        (for up to the transport's read timeout): False comes on time, and the request
        goes on and settles its operations when the reply comes (a later flush or drain
        waits for it). From one of this engine's callbacks it stays in that thread.

        Operations waiting out a backoff are not due: flush does not wait for them (see
        `drain`). Operations another thread of this engine has on the way (the background
        loop's, with ``pipeline`` > 1) are waited for, and what they held back is sent: True
        never leaves one of them on the wire. An explicit flush tries even when the monitor
        believes we are offline.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        # In a callback, a worker would wait for the cycle the callback is part of.
        if deadline is None or self._cycles.in_lane:
            return self._flush(deadline)
        finished, result = within(
            timeout or 0.0, lambda: self._flush(deadline), name="pigeon-flush"
        )
        return finished and bool(result)

    def _flush(self, deadline: float | None) -> bool:
        self._holds.reachable()
        self._sweep()
        while True:
            seen = self._notices.count
            if not self._lanes.run(deadline, honour_stop=False):
                return False
            if self._notices.count == seen and not self._cycles.busy():
                return True  # nothing due, nothing on the way, nothing new meanwhile
            # Something moved while we looked: our cycles sent operations (their entities'
            # next ones may be due now), another thread's cycle ended or is still on the
            # way, or something was enqueued. Wait out a cycle on the way, then look again.
            if deadline is not None and time.monotonic() >= deadline:
                return False
            seen = self._notices.count
            if self._cycles.busy():
                remaining = None if deadline is None else deadline - time.monotonic()
                self._cycles.wait(seen, remaining, busy=True)

    def drain(self, timeout: float | None = None) -> bool:
        """Flush, then keep waiting out backoffs (a 429's hold of the whole queue too)
        until nothing is pending at all (True), or until ``timeout``, a pause, or an
        unreachable server (False). Conflicts and dead letters are not pending: they wait
        for a person or a resolver. Nor is True ever returned while this engine has an
        operation on the way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.flush(remaining):
                # Given up on: a pause, an unreachable server (or no request could be
                # made), the timeout. A 429's hold is a backoff like the others: waited
                # out (it may have ended already, between flush's look and this one).
                stuck = self._holds.unreachable_until > self._clock()
                if self.queue.paused is not None or stuck:
                    return False
                hold = self._holds.throttled() + self._batch_window
                if deadline is not None and time.monotonic() + hold >= deadline:
                    return False
                self._notices.wait_past(self._notices.count, hold)
                continue
            # Taken before looking: whatever changes after the look posts a notice after it.
            seen = self._notices.count
            due = self.queue.next_due_at()
            # After next_due_at: a cycle counts itself busy before it takes operations, so
            # those it took between the two looks are seen here, if not as due.
            busy = self._cycles.busy()
            if due is None and not busy:
                return True
            pause: float | None = None  # a cycle on the way: until it ends (a notice)
            if due is not None:
                wait = due - self._clock()
                pause = wait + self._batch_window if wait > 0 else min(self._idle_recheck, 0.05)
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                pause = remaining if pause is None else min(pause, remaining)
            # Until the next backoff timer, the end of a cycle on the way, or an enqueue.
            self._cycles.wait(seen, pause, busy=busy)

    # -- thread mode ------------------------------------------------------------------

    def start(self) -> None:
        """Run in a daemon thread until `stop()`. After a `stop` whose timeout ran out,
        this first waits for that loop to end its cycle: one loop per engine."""
        if self._thread is not None and self._thread.is_alive():
            if not self._stopping.is_set():
                return  # running
            self._thread.join()
        self._stopping.clear()
        self._attach()
        self.connectivity.start()
        self._thread = threading.Thread(target=self._run_thread, name="pigeon-sync", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop after the cycle in progress (its operations are all settled or released)."""
        self._stopping.set()
        self._waker.set()
        thread = self._thread
        # From a callback (any thread doing this engine's work: its loop, a lane, a
        # flush) the loop cannot end before the callback returns: joining it raised
        # (its own thread) or waited out the timeout (a lane the loop waits for). The
        # loop stops after the cycle in progress all the same.
        inside = thread is threading.current_thread() or self._cycles.in_lane
        if thread is not None and not inside:
            thread.join(timeout)
            if not thread.is_alive():
                self._thread = None  # else kept: start() waits for it to end
        self.connectivity.stop()

    def close(self, timeout: float | None = 10.0) -> None:
        """`stop`, then let go of the queue and the monitor: they stop calling this engine
        (and keeping it alive), so an application can make and drop engines on one queue.
        `start` or `run` takes hold of them again."""
        self.stop(timeout)
        self._detach()

    def _attach(self) -> None:
        """Be told of enqueues (if the queue offers ``subscribe``) and connectivity."""
        self._sweeper.due = True  # start, run: the first step looks for conflicts
        if self._attached:
            return
        self._attached = True
        self.connectivity.subscribe(self._connectivity_changed)
        self.queue.subscribe(self.notify)

    def _detach(self) -> None:
        if not self._attached:
            return
        self._attached = False
        self.queue.unsubscribe(self.notify)
        self.connectivity.unsubscribe(self._connectivity_changed)

    def __enter__(self) -> SyncEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run_thread(self) -> None:
        while not self._stopping.is_set():
            self._waker.clear()
            try:
                delay = self._step()
            except Exception as exc:
                # Only stop() cuts the backoff short: a wake-up (an enqueue) would retry
                # a failing step at once, and enqueues can come faster than any backoff.
                self._stopping.wait(self._step_failed(exc))
                continue
            self._error_streak = 0
            if self._stopping.is_set():
                break
            self._waker.wait(delay)

    # -- asyncio mode -----------------------------------------------------------------

    async def run(self) -> None:
        """Run on the current event loop until cancelled or `stop()`."""
        self._stopping.clear()
        self._attach()
        self._waker.bind()
        self.connectivity.start()
        try:
            while not self._stopping.is_set():
                self._waker.clear()
                try:
                    delay = await asyncio.to_thread(self._step)
                except Exception as exc:
                    await self._waker.sleep_async(self._step_failed(exc), self._stopping)
                    continue
                self._error_streak = 0
                if self._stopping.is_set():
                    break
                await self._waker.wait_async(delay)
        finally:
            # Cancelled while a sync ran in its worker thread: that thread goes on by
            # itself, so tell it to stop after the cycle in progress, as stop() would.
            self._stopping.set()
            self._waker.unbind()
            # Not on the loop's thread: stopping a ProbeMonitor joins its thread, which
            # may be in a probe (seconds against a silent server), and every other task
            # would freeze meanwhile. Shielded: a second cancel does not cut it short.
            await asyncio.shield(asyncio.to_thread(self.connectivity.stop))

    async def aflush(self, timeout: float | None = None) -> bool:
        """`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    # -- the loop body ----------------------------------------------------------------

    def _step_failed(self, exc: Exception) -> float:
        """A step of the background loop raised: record it and say how long to back off."""
        self._error_streak += 1
        delay = self._reconnect.delay(self._error_streak)
        step = "pigeon sync step failed (%d in a row); next try in %.2f s"
        failure(log, step, self._error_streak, delay, exc=exc)
        self._error(exc)
        return delay

    def _error(self, exc: BaseException) -> None:
        self.last_error = exc
        self.callbacks.emit("on_error", exc)

    def _step(self) -> float | None:
        """Sync while something is due and we may (online, not paused, not backing off
        from an unreachable server), then say how long to sleep."""
        self._sweep()
        paused = self.queue.paused is not None
        online = self.connectivity.online
        now = self._clock()
        if not paused and online and now >= self._holds.until:
            self._lanes.run(None, honour_stop=True)  # until nothing is due, or it must stop
            paused = self.queue.paused is not None
            online = self.connectivity.online
            now = self._clock()
        return wait_time(
            now=now,
            next_due=None if paused else self.queue.next_due_at(),
            paused=paused,
            online=online,
            unreachable_until=self._holds.until,
            idle_recheck=self._idle_recheck,
            batch_window=self._batch_window,
        )

    def _sweep(self) -> None:
        """Conflict-held operations no callback settled or recorded: see `Sweep`."""
        if not self._cycles.in_lane:
            try:
                if self._sweeper(self._lanes.turns, self._lanes.lanes):
                    self.notify()
            except Exception as exc:  # a full disk: reported, and tried again next time
                self._error(exc)

    def _connectivity_changed(self, online: bool) -> None:
        if online:
            self._holds.reachable()
        self.notify()
