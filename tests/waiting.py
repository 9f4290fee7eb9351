"""The one way a test waits for something another thread or process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    condition: Callable[[], object],
    timeout: float = 10.0,
    what: str = "the condition",
    interval: float = 0.02,
) -> None:
    """Return once ``condition()`` is true; fail the test, naming ``what``, if it is still
    false after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
