"""Operation ids: UUID version 7 (RFC 9562), time-ordered so the id index grows at its end."""

from __future__ import annotations

import os
import time
import uuid


def uuid7() -> str:
    """48 bits of Unix milliseconds, version 7, 74 random bits. Python 3.11 has no uuid7."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return str(uuid.UUID(int=value))


def uuid4() -> str:
    """Idempotency keys: fully random, nothing to learn from them."""
    return str(uuid.uuid4())
