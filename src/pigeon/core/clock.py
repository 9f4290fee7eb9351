"""Hybrid logical clock (Kulkarni et al.), pure code.

A timestamp is (wall milliseconds, logical counter, node). It never goes backwards on one
node, and after `receive(remote)` it is never behind the remote stamp, whatever the wall
clock says. It is encoded as a fixed-width string so that string order is clock order
(SQL ``ORDER BY`` and ``max()`` work on the stored text).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from threading import Lock

_WALL_DIGITS = 15
_COUNTER_DIGITS = 10
# Hot path (every enqueue stamps one): %-formatting with the widths written in is half
# the cost of an f-string whose format spec is itself built at each call.
_FORMAT = f"%0{_WALL_DIGITS}d-%0{_COUNTER_DIGITS}d-%s"


@dataclass(frozen=True, order=True, slots=True)
class HLCTimestamp:
    wall_ms: int
    counter: int
    node: str = ""

    def encode(self) -> str:
        return _FORMAT % (self.wall_ms, self.counter, self.node)

    @classmethod
    def decode(cls, text: str) -> HLCTimestamp:
        try:
            wall, counter, node = text.split("-", 2)
            return cls(int(wall), int(counter), node)
        except ValueError as exc:
            raise ValueError(f"not a hybrid logical clock stamp: {text!r}") from exc

    def __str__(self) -> str:
        return self.encode()


# A stamp's text as ``encode`` writes it: its wall and counter in ASCII digits, full width.
_FIXED = re.compile(f"[0-9]{{{_WALL_DIGITS}}}-[0-9]{{{_COUNTER_DIGITS}}}-")


def latest(texts: Sequence[str]) -> HLCTimestamp:
    """The greatest of the stamps ``texts`` (none empty), each in a form ``decode`` reads.
    When each is in ``encode``'s form, their text order is their clock order, and only
    the greatest is decoded: a batch's stamps cost a decode each (~0.85 us) otherwise."""
    if all(_FIXED.match(text) for text in texts):
        return HLCTimestamp.decode(max(texts))
    return max(map(HLCTimestamp.decode, texts))


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class HybridLogicalClock:
    """One node's clock. Thread-safe; `wall` is injectable for tests and skewed devices."""

    node: str
    wall: Callable[[], int] = _wall_ms
    _last: HLCTimestamp = field(default=HLCTimestamp(0, 0), init=False)
    _lock: Lock = field(default_factory=Lock, init=False, repr=False)

    def now(self) -> HLCTimestamp:
        """A stamp for a local event: greater than every stamp this clock has made or seen."""
        with self._lock:
            self._last = tick(self._last, self.wall(), self.node)
            return self._last

    def stamp_texts(self, n: int) -> list[str]:
        """``n`` stamps of local events in a row, encoded: what ``n`` calls of ``now()``
        and ``encode()`` give, under one lock and one reading of the wall. With the wall
        read once, only the first can move to it; the rest count on from there, so the
        texts are written straight from the numbers (a stamp object each cost a batch's
        contexts more than their own making)."""
        if n <= 0:
            return []
        with self._lock:
            last, wall, node = self._last, self.wall(), self.node
            first = tick(last, wall, node)
            at, counter = first.wall_ms, first.counter
            self._last = HLCTimestamp(at, counter + n - 1, node)
        # The wall and the node written once, each counter padded as _FORMAT pads it.
        head, tail = str(at).zfill(_WALL_DIGITS) + "-", f"-{node}"
        return [head + str(c).zfill(_COUNTER_DIGITS) + tail for c in range(counter, counter + n)]

    def receive(self, remote: HLCTimestamp) -> HLCTimestamp:
        """Merge a stamp from another node; the result is greater than both."""
        with self._lock:
            self._last = tick_on_receive(self._last, remote, self.wall(), self.node)
            return self._last

    def observe(self, last: HLCTimestamp) -> None:
        """Restore state after a restart (e.g. from the greatest stamp stored)."""
        with self._lock:
            if (last.wall_ms, last.counter) > (self._last.wall_ms, self._last.counter):
                self._last = HLCTimestamp(last.wall_ms, last.counter, self.node)


def tick(last: HLCTimestamp, wall_ms: int, node: str) -> HLCTimestamp:
    """The stamp of a local event after ``last``."""
    if wall_ms > last.wall_ms:
        return HLCTimestamp(wall_ms, 0, node)
    return HLCTimestamp(last.wall_ms, last.counter + 1, node)


def tick_on_receive(
    last: HLCTimestamp, remote: HLCTimestamp, wall_ms: int, node: str
) -> HLCTimestamp:
    """The stamp of receiving ``remote`` after ``last``: greater than both. (Not a merge of
    two states: it always moves on, so taking the same stamp twice gives two stamps.)"""
    top = max(last.wall_ms, remote.wall_ms, wall_ms)
    if top == last.wall_ms == remote.wall_ms:
        counter = max(last.counter, remote.counter) + 1
    elif top == last.wall_ms:
        counter = last.counter + 1
    elif top == remote.wall_ms:
        counter = remote.counter + 1
    else:
        counter = 0
    return HLCTimestamp(top, counter, node)
