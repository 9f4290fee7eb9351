"""The serving process's memory: giving it back after a large request (Linux with glibc;
a no-op elsewhere), and how often the cycle collector runs.

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

And ``configure_gc()`` (once per process too) lets ``GC_YOUNG`` new container objects pile
up before the collector's first generation runs, instead of CPython's 700: a batch of 100
operations makes thousands of dicts and lists, which reference counting frees anyway, and
the collector's passes over them were 5-8% of a batch's CPU (bench/e2e_bench.py's server
alone; in process, 5.30-5.57 ms a batch of 100 against 5.02-5.10 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
from typing import Any

LARGE = 1 << 20  # bytes: a body this large is followed by a trim
GC_YOUNG = 20_000  # new container objects before a collection of the youngest generation
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


def configure_gc() -> None:
    """The youngest generation collected after ``GC_YOUNG`` new objects (see above); the
    older ones as they were."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, older, oldest)


def give_back(size: int) -> None:
    """After a request that held ``size`` bytes of body: return free heap pages."""
    if _LIBC is not None and size >= LARGE:
        _LIBC.malloc_trim(0)
