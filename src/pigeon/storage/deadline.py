"""The deadline of what the calling thread is doing, which its database waits keep.

A job runs under its timeout (the worker sets it), and the worker's writes of a job's
outcome under the time past which they are given up. Within ``waits_until(until)`` every wait
the thread makes on a database ends by ``until``: PostgreSQL's wait for a pooled
connection and for a statement's answer (and the server stops the statements by then too:
the transaction's ``statement_timeout``), SQLite's write lock and busy wait. What runs out
raises ``JobTimeout`` rather than waiting on: a job whose database is gone ends as a
timed-out attempt, in its own thread and on time, instead of holding its thread until
the watchdog has to abandon the process. A thread with no deadline waits as configured.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from pigeon.exceptions import JobTimeout

# Monotonic seconds; a context variable, so each thread has its own (none by default).
_until: ContextVar[float | None] = ContextVar("pigeon_deadline", default=None)


@contextlib.contextmanager
def waits_until(until: float) -> Iterator[None]:
    """The block's database waits end by ``until`` (``time.monotonic``); nested in another
    deadline, the earlier of the two holds."""
    outer = _until.get()
    token = _until.set(until if outer is None else min(outer, until))
    try:
        yield
    finally:
        _until.reset(token)


def left() -> float | None:
    """Seconds left of the thread's deadline (0 once past it), or None if it has none."""
    until = _until.get()
    return None if until is None else max(0.0, until - time.monotonic())


def bound(seconds: float) -> tuple[float, bool]:
    """``seconds`` capped by what is left of the deadline, and whether the deadline is
    what bounds it (so a wait that runs out is told as ``expired``)."""
    remaining = left()
    if remaining is None or seconds <= remaining:
        return seconds, False
    return remaining, True


def expired(waiting_for: str) -> JobTimeout:
    return JobTimeout(f"the deadline ran out while waiting for {waiting_for}")
