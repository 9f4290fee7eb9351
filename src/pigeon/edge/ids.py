"""Operation ids: UUID version 7 (RFC 9562), time-ordered so the id index grows at its end.

Both are formatted from their 128-bit integer directly: ``str(uuid.UUID(...))`` costs
more than the rest of making them, and every enqueue makes two.
"""

from __future__ import annotations

import os
import time


def _format(value: int) -> str:
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7() -> str:
    """48 bits of Unix milliseconds, version 7, 74 random bits. Python 3.11 has no uuid7."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
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
    return _format((int.from_bytes(os.urandom(16), "big") & _V4_CLEAR) | _V4_SET)
