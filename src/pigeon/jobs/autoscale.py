"""Worker budgets at run time: how many threads a queue should have now. Pure, no I/O.

Like Celery's autoscaler: a queue starts at its minimum; while jobs are waiting and every
thread is busy it grows (enough threads for the backlog, one batch each), never past its
maximum; after ``keepalive`` seconds with nothing waiting it shrinks back to the threads
still busy, never below its minimum. A worker process asks ``threads_wanted`` a few times a
second with what it sees: its threads, how many are running a batch, the ready backlog.

``Budget`` is one process's share of a queue's (min_workers, max_workers); the supervisor
splits the App's budget over its processes so their sum never exceeds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pigeon.exceptions import ConfigurationError

DEFAULT_KEEPALIVE = 5.0  # seconds of no backlog before idle threads retire


@dataclass(frozen=True)
class Budget:
    """Threads one process may run for a queue: at least ``min``, at most ``max``."""

    min: int
    max: int

    def __post_init__(self) -> None:
        if not 0 <= self.min <= self.max or self.max < 1:
            raise ConfigurationError(
                f"a worker budget needs 0 <= min <= max and max >= 1, "
                f"got min={self.min} max={self.max}"
            )

    def __str__(self) -> str:
        return f"{self.min}:{self.max}"


def parse_budget(text: str) -> int | Budget:
    """``"12"``: at most 12 threads, the minimum taken from the queue's configuration;
    ``"2:12"``: min:max given in full. ConfigurationError says what is wrong."""
    return checked_budget(*budget_numbers(text))


def budget_numbers(text: str) -> tuple[int | None, int]:
    """``(min or None, max)`` as written in ``text``, or ConfigurationError if it is not
    ``THREADS`` or ``MIN:MAX``."""
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else (None, int(text))
    except ValueError:
        raise ConfigurationError(f"expected THREADS or MIN:MAX, got {text!r}") from None


def checked_budget(least: int | None, most: int) -> int | Budget:
    """The budget ``least:most`` (``most`` alone: the queue's minimum applies), or a
    ConfigurationError naming what is wrong with it."""
    if least is not None and least > most:
        problem = f"min {least} > max {most}"
    elif least is not None and least < 0:
        problem = f"min {least} is negative"
    elif most < 1:
        problem = f"max {most}: at least 1 thread"
    else:
        return most if least is None else Budget(least, most)
    raise ConfigurationError(problem)


def threads_wanted(
    budget: Budget,
    threads: int,
    busy: int,
    backlog: int,
    idle_seconds: float,
    *,
    batch: int = 1,
    keepalive: float = DEFAULT_KEEPALIVE,
) -> int:
    """The number of threads the queue should have now.

    ``threads``: alive now; ``busy``: of those, running a batch; ``backlog``: jobs ready
    to claim that no thread holds; ``idle_seconds``: how long the backlog has been empty.
    """
    threads = max(0, threads)
    busy = min(max(0, busy), threads)
    if backlog > 0:
        if busy >= threads:  # everyone is working and jobs still wait: grow
            wanted = busy + math.ceil(backlog / max(1, batch))
            return _clamp(budget, max(threads, wanted))
        return _clamp(budget, threads)  # an idle thread will pick the backlog up
    if idle_seconds >= keepalive and threads > busy:
        return _clamp(budget, busy)
    return _clamp(budget, threads)


def _clamp(budget: Budget, n: int) -> int:
    return max(budget.min, min(budget.max, n))
