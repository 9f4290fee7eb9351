"""Operation ids: UUID version 7 (RFC 9562), time-ordered so the id index grows at its end.

Both are formatted from their 128-bit integer directly: ``str(uuid.UUID(...))`` costs
more than the rest of making them, and every enqueue makes two.

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

_POOL_SIZE = 4096


class _RandomPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = b""
        self._at = 0

    def take(self, n: int) -> int:
        """``n`` fresh random bytes from ``os.urandom``, as a big-endian integer."""
        with self._lock:
            at = self._at
            if at + n > len(self._bytes):
                self._bytes, at = os.urandom(_POOL_SIZE), 0
            self._at = at + n
            return int.from_bytes(self._bytes[at : at + n], "big")

    def clear(self) -> None:
        self._lock = threading.Lock()  # a fork may have copied it held
        self._bytes, self._at = b"", 0


_pool = _RandomPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.clear)


def _format(value: int) -> str:
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7() -> str:
    """48 bits of Unix milliseconds, version 7, 74 random bits. Python 3.11 has no uuid7."""
    ms = time.time_ns() // 1_000_000
    rand = _pool.take(10)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return _format(value)


_V4_CLEAR = ~((0xF << 76) | (0b11 << 62))
_V4_SET = (0x4 << 76) | (0b10 << 62)


def uuid4() -> str:
    """Idempotency keys: fully random (122 bits from os.urandom), nothing to learn from them."""
    return _format((_pool.take(16) & _V4_CLEAR) | _V4_SET)
