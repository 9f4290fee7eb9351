"""A worker process's bookkeeping: the jobs it holds, its counters, its memory use."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field

from pigeon.jobs.job import Job


@dataclass
class Held:
    """A job this process holds a lease on, as its claim thread and heartbeat see it."""

    job: Job
    started: float = 0.0  # monotonic; 0 while claimed but not yet running
    timed_out: bool = False
    done: bool = False  # its task returned; the outcome may still wait in the batch buffer
    lost: bool = False  # the heartbeat found the lease gone (expired and rescued)


@dataclass
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    timed_out: int = 0
    unrecorded: int = 0  # outcomes the database never heard of (left to lease expiry)
    by_queue: dict[str, int] = field(default_factory=dict)
    purged: int = 0
    heartbeat_errors: int = 0  # heartbeat rounds that failed outside the database


def rss_mib() -> float:
    """Current resident set size (Linux /proc), else the peak as getrusage reports it."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
