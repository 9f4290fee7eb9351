"""One worker process's claim threads per queue, sized within the queue's budget.

The decision is ``autoscale.threads_wanted`` (pure); this is its bookkeeping: how many threads
live, how many should, how many run a job, since when nothing waits. Growing spawns
threads at once; shrinking lowers the target and wakes the queue, and the extra threads
retire when they next look for work, never in the middle of a job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from pigeon.jobs.autoscale import DEFAULT_KEEPALIVE, Budget, threads_wanted


@dataclass
class _Queue:
    budget: Budget
    batch: int
    alive: int = 0
    target: int = 0
    busy: int = 0
    quiet_since: float = 0.0  # monotonic; the last time jobs were seen waiting
    spawned: int = 0
    peak: int = 0


class Scaler:
    def __init__(
        self,
        budgets: Mapping[str, Budget],
        spawn: Callable[[str, str], None],
        wake: Callable[[str], None],
        *,
        batch: Mapping[str, int],
        keepalive: float = DEFAULT_KEEPALIVE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spawn = spawn  # (queue, thread label)
        self._wake = wake
        self.keepalive = keepalive
        self.clock = clock
        self._lock = threading.Lock()
        self._queues = {q: _Queue(b, batch[q]) for q, b in budgets.items()}

    def resize(self, queue: str, target: int) -> None:
        with self._lock:
            state = self._queues[queue]
            grow = max(0, target - state.alive)
            shrink = target < state.alive
            state.target = target
            state.alive += grow
            first = state.spawned
            state.spawned += grow
            state.peak = max(state.peak, state.alive)
        for i in range(grow):
            self._spawn(queue, f"{queue}-{first + i}")
        if shrink:
            self._wake(queue)

    def retire(self, queue: str) -> bool:
        """Asked by a claim thread with nothing to run: True means exit now."""
        with self._lock:
            state = self._queues[queue]
            if state.alive > state.target:
                state.alive -= 1
                return True
        return False

    @contextmanager
    def busy(self, queue: str) -> Iterator[None]:
        with self._lock:
            self._queues[queue].busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._queues[queue].busy -= 1

    def observe(self, queue: str, backlog: int) -> int:
        """Resize ``queue`` for a backlog just counted; returns its new target."""
        now = self.clock()
        with self._lock:
            state = self._queues[queue]
            if backlog > 0 or not state.quiet_since:
                state.quiet_since = now
            target = threads_wanted(
                state.budget,
                state.target,
                state.busy,
                backlog,
                now - state.quiet_since,
                batch=state.batch,
                keepalive=self.keepalive,
            )
            changed = target != state.target
        if changed:
            self.resize(queue, target)
        return target

    def free(self, queue: str) -> int:
        """Live threads of ``queue`` not running a job (a claiming thread counts itself)."""
        with self._lock:
            state = self._queues[queue]
            return max(0, min(state.alive, state.target) - state.busy)

    def cap(self, queue: str) -> int:
        """Backlog beyond this changes nothing: every thread would have a full share."""
        state = self._queues[queue]
        return max(1, state.budget.max * state.batch)

    def threads(self, queue: str) -> int:
        with self._lock:
            state = self._queues[queue]
            return min(state.alive, state.target)

    def peak(self, queue: str) -> int:
        with self._lock:
            return self._queues[queue].peak
