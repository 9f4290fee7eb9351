"""The tests' clock: one definition for every suite that passes a clock in."""

from __future__ import annotations


class FakeClock:
    """A clock in seconds (wall or monotonic: whatever the code under test is handed),
    moved by hand with ``advance`` or by setting ``now``: a test that waits for a lease,
    a backoff or a retention period never sleeps."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
