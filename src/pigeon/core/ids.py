"""Ids pigeon makes for rows it indexes: UUID version 7 (RFC 9562), time-ordered, so each
index they key grows at its end. The edge's operation ids and idempotency keys (the
server's claims are keyed by principal and key: random keys put each insert of a batch
on a page of its own, 170 pages written a batch of 100 creates at 50,000 claims where
time-ordered ones write 55), the server's record, outbox message and provider call ids.
74 random bits each: nothing to guess; the time they carry the operation's own clock
already says.

Both kinds are written as text directly, from random hex digits: ``str(uuid.UUID(...))``
costs more than the rest of making them, and every enqueue makes two. The pool keeps its
random bytes as hex text, so an id is a few slices of it (no integer arithmetic, no
formatting of a 128-bit number); the version digit is written in, and the variant digit
is ``8``-``b`` by the low two bits of a random digit.

Random bits come from ``os.urandom`` 4 KiB at a time. ``os.urandom`` releases the
interpreter lock around its system call, so with one call per id every enqueue gave the
lock away twice and, with threads enqueueing together, waited twice to get it back (a
thread switch each time); a refill releases it once per 150 enqueues or so. The pool is
per process: a forked child drops what it inherited, so it never repeats its parent's ids.
"""

from __future__ import annotations

import os
import threading
import time

_POOL_SIZE = 4096  # random bytes per refill: 8,192 hex digits, ~160 enqueues


class _RandomPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hex = ""
        self._at = 0

    def take(self, n: int) -> str:
        """``n`` fresh random hex digits (4 bits each) from ``os.urandom``."""
        with self._lock:
            at = self._at
            end = at + n
            if end > len(self._hex):
                self._hex, at, end = os.urandom(_POOL_SIZE).hex(), 0, n
            self._at = end
            return self._hex[at:end]

    def clear(self) -> None:
        self._lock = threading.Lock()  # a fork may have copied it held
        self._hex, self._at = "", 0


_pool = _RandomPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.clear)

# The RFC 4122 variant digit (binary 10xx) keeping a random digit's two low bits.
_VARIANT = {d: "89ab"[int(d, 16) & 0b11] for d in "0123456789abcdef"}
_MS_MASK = (1 << 48) - 1


def uuid7() -> str:
    """48 bits of Unix milliseconds, version 7, 74 random bits. Python 3.11 has no uuid7."""
    ms = "%012x" % (time.time_ns() // 1_000_000 & _MS_MASK)
    r = _pool.take(19)  # rand_a: 3 digits; variant: 2 bits of 1; rand_b: the other 15
    return f"{ms[:8]}-{ms[8:]}-7{r[:3]}-{_VARIANT[r[3]]}{r[4:7]}-{r[7:]}"


def uuid4() -> str:
    """Fully random (122 bits from os.urandom): for a name no index orders (a queue file's
    node id)."""
    h = _pool.take(31)  # 30 digits whole, and 2 bits of the variant's
    return f"{h[:8]}-{h[8:12]}-4{h[12:15]}-{_VARIANT[h[15]]}{h[16:19]}-{h[19:]}"
