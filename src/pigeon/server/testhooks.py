"""A fault switch for proving the intake's rules from outside: ``pigeon serve --test-hooks``.

Off unless the server is started with it, and then only with two keys: the option and
``PIGEON_TEST_HOOKS=1`` in the environment (one flag pasted into a production unit file is
not enough), on a loopback address (the command refuses any other host, and says so
loudly when it starts). A request that came through a proxy (it carries ``Forwarded``,
``X-Forwarded-For`` or ``X-Real-IP``) is not the test's own: asking it for a hook is
refused with 400, whatever the address the server listens on. With it on, a
single-operation request may carry:

- ``X-Pigeon-Test-Delay-Ms: N``: after its key is claimed, the handler holds for N ms
  (at most ``MAX_DELAY_MS``): the request is "in progress" for that long, so a duplicate
  can meet it, or the process can be killed in the middle of it;
- ``X-Pigeon-Test-Fail: 1``: the handler writes, then fails with a 500; everything of the
  operation rolls back and its key is free, so the retry runs;
- ``X-Pigeon-Test-Set-Cookie: V``: the original response carries ``Set-Cookie: V``; a
  replay must not (a cookie belongs to a connection, not to the key's answer);
- ``X-Pigeon-Test-Crash: before-commit``: the handler runs and writes, then the serving
  process SIGKILLs itself before the commit; ``after-commit``: the operation commits,
  then the process SIGKILLs itself before anyone is answered (`crash_if_due`).

The rehearsal of a user's own app drives the same switch.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn

DELAY = "X-Pigeon-Test-Delay-Ms"
FAIL = "X-Pigeon-Test-Fail"
SET_COOKIE = "X-Pigeon-Test-Set-Cookie"
CRASH = "X-Pigeon-Test-Crash"
CRASH_POINTS = ("before-commit", "after-commit")
MAX_DELAY_MS = 120_000
MAX_COOKIE = 1024
ENV_KEY = "PIGEON_TEST_HOOKS"  # the second key: "1" in pigeon serve's environment
FORWARDED = ("forwarded", "x-forwarded-for", "x-real-ip")  # a proxy passed the request on


class BadTestHook(ValueError):
    """A test-hook header that cannot be honoured; the request is refused with 400."""


@dataclass(frozen=True, slots=True)
class TestHooks:
    """What one request asked of the fault switch."""

    __test__ = False  # not a test class, whatever its name tells pytest

    delay_ms: int = 0
    fail: bool = False
    set_cookie: str | None = None
    crash: str | None = None  # one of CRASH_POINTS

    @property
    def delay(self) -> float:
        return self.delay_ms / 1000

    @classmethod
    def parse(cls, headers: Mapping[str, str]) -> TestHooks | None:
        """The hooks ``headers`` ask for (None when none), or ``BadTestHook``."""
        delay_text = headers.get(DELAY)
        fail_text = headers.get(FAIL)
        cookie = headers.get(SET_COOKIE)
        crash = headers.get(CRASH)
        if delay_text is None and fail_text is None and cookie is None and crash is None:
            return None
        if any(name in headers for name in FORWARDED):
            raise BadTestHook(
                "test hooks are for the test's own loopback requests, not for one that came "
                "through a proxy (Forwarded, X-Forwarded-For or X-Real-IP)"
            )
        delay_ms = 0
        if delay_text is not None:
            # ASCII digits, and few: isdigit() passes '²', which int() refuses with a 500.
            digits = delay_text.strip()
            if not (digits.isascii() and digits.isdigit() and len(digits) <= 9) or (
                int(digits) > MAX_DELAY_MS
            ):
                raise BadTestHook(
                    f"{DELAY} must be a whole number of milliseconds from 0 to {MAX_DELAY_MS}"
                )
            delay_ms = int(digits)
        if fail_text not in (None, "0", "1"):
            raise BadTestHook(f"{FAIL} must be 0 or 1")
        if cookie is not None and (
            not cookie or len(cookie) > MAX_COOKIE or not cookie.isprintable()
        ):
            raise BadTestHook(f"{SET_COOKIE} must be 1-{MAX_COOKIE} printable characters")
        if crash is not None and crash not in CRASH_POINTS:
            raise BadTestHook(f"{CRASH} must be one of {', '.join(CRASH_POINTS)}")
        return cls(delay_ms, fail_text == "1", cookie, crash)


# Keys whose operation asked to die once it committed; process-wide, as the switch is.
_crash_after: set[str] = set()
_crash_lock = threading.Lock()


def crash() -> NoReturn:
    """SIGKILL this process: no finally block runs, nothing more is written or sent."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # not reached: the kernel ends the process first


def crash_after_commit(key: str) -> None:
    """Die once ``key``'s operation has committed (`crash_if_due`)."""
    with _crash_lock:
        _crash_after.add(key)


def crash_if_due(committed: Iterable[str]) -> None:
    """Called with the keys that just committed, before anyone is answered."""
    with _crash_lock:
        due = bool(_crash_after.intersection(committed))
    if due:
        crash()
