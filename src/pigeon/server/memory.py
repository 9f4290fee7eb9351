"""Giving memory back after a large request (Linux with glibc; a no-op elsewhere).

A batch may hold 16 MiB of body, as much again as text and as decoded operations, and its
answer. Python frees all of it when the request ends, but glibc keeps freed memory in the
heaps of the threads that used it: ``pigeon serve``'s resident memory grew by tens of MiB
per large batch and stayed there (bench/memory_bench.py). Two remedies, both glibc's own:

- ``configure_malloc()`` (``pigeon serve`` calls it once per process) fixes the mmap threshold at
  1 MiB: every buffer that large (a body, its text, an answer) is mapped on its own and
  unmapped when freed. By default glibc raises the threshold each time such a buffer is
  freed, so the next ones came from a heap, and stayed in it.
- ``give_back(size)`` after a request that held ``size`` bytes of body: for 1 MiB or
  more, ``malloc_trim(0)`` returns the free pages of the heaps (the thousands of
  kilobyte-sized strings a batch decodes into) to the system. It costs a few
  milliseconds, against the hundreds a large batch takes.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from typing import Any

LARGE = 1 << 20  # bytes: a body this large is followed by a trim
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL("libc.so.6")
        if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt"):
            return libc
    return None


_LIBC = _libc()


def configure_malloc() -> None:
    """Map every allocation of ``LARGE`` bytes or more on its own (see above)."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, LARGE)


def give_back(size: int) -> None:
    """After a request that held ``size`` bytes of body: return free heap pages."""
    if _LIBC is not None and size >= LARGE:
        _LIBC.malloc_trim(0)
