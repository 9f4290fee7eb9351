"""When the engine may send again: holds on the whole queue, apart from each operation's
own backoff (which the queue keeps as its ``next_attempt_at``).

``unreachable``: a request could not connect, or could not be made at all (the token
callable raised). The ``reconnect`` backoff, growing with each such cycle in a row; a
reply clears it, and so do connectivity regained and an explicit flush, which try anyway.

``throttled``: the server answered 429, which is about this client's rate, not one
operation. Nothing goes out before the wait it implies, not even on an explicit flush:
the next request would only earn another 429 and spend another attempt.
"""

from __future__ import annotations

from pigeon.core.retry import RetryPolicy
from pigeon.sync.events import CycleReport
from pigeon.sync.executor import Clock


class Holds:
    def __init__(self, reconnect: RetryPolicy, clock: Clock) -> None:
        self._reconnect = reconnect
        self._clock = clock
        self._streak = 0  # cycles in a row that could not reach the server
        self.unreachable_until = 0.0
        self.throttled_until = 0.0

    @property
    def until(self) -> float:
        """The engine's clock time before which the background loop sends nothing."""
        return max(self.unreachable_until, self.throttled_until)

    def throttled(self) -> float:
        """Seconds left of a 429's hold (0 when none)."""
        return max(0.0, self.throttled_until - self._clock())

    def reachable(self) -> None:
        """Connectivity regained, or an explicit flush: try the server again now."""
        self.unreachable_until = 0.0

    def after(self, report: CycleReport) -> None:
        """Take a cycle's report into account (under the engine's state lock)."""
        if report.throttled_until is not None:
            self.throttled_until = max(self.throttled_until, report.throttled_until)
        if report.unreachable or report.error is not None:
            self._streak += 1
            self.unreachable_until = self._clock() + self._reconnect.delay(self._streak)
        elif report.sent:
            self._streak = 0
            self.unreachable_until = 0.0
