"""The one way a test waits for something another thread or process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    condition: Callable[[], object],
    timeout: float = 10.0,
    what: str | Callable[[], object] = "the condition",
    interval: float = 0.02,
) -> None:
    """Return once ``condition()`` is true; fail the test, naming ``what``, if it is still
    false after ``timeout`` seconds. ``what`` may be a callable: what it says at the deadline
    (the state that was not reached) is the failure's message."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}")
        time.sleep(interval)
