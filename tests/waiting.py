"""The one way a test waits for something another thread or process brings about."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx


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


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether a GET of ``url`` comes back 200; False while nothing listens there yet (a
    server's socket is bound, and its port printed, before it accepts) or it is gone."""
    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.TransportError:
        return False


def until_answers(
    url: str, timeout: float = 30.0, proc: subprocess.Popen[Any] | None = None
) -> None:
    """Wait for ``url`` to answer 200; fail the test, naming it, after ``timeout``, or as
    soon as ``proc`` (the server's process) has ended."""

    def ready() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args} ended with {proc.returncode} before {url} answered")
        return answers(url)

    wait_for(ready, timeout, f"{url} to answer", interval=0.05)
