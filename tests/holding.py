"""A lock or transaction held by another thread while a test's own call meets it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def held_in_a_thread(
    lock: contextlib.AbstractContextManager[object], seconds: float
) -> Iterator[None]:
    """``lock`` taken in a thread of its own and held until ``seconds`` pass or the block
    ends, whichever comes first: it lets go by itself while the test's own call is still
    waiting for it."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait(seconds)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(5), "the holding thread never took the lock"
        yield
    finally:
        done.set()
        holder.join()
