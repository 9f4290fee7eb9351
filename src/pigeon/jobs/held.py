"""A worker process's bookkeeping: the jobs it holds, its counters, its memory use."""

from __future__ import annotations

import logging
import math
import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pigeon.jobs.job import Job
from pigeon.logs import summary

if TYPE_CHECKING:
    from pigeon.jobs.manager import AttemptOutcome, JobManager

log = logging.getLogger("pigeon.jobs.worker")

# A graceful stop whose grace ran out: the process exits with these jobs mid-run.
LEFT_RUNNING = (
    "worker %s: jobs %s still running after the %gs grace; they are claimed again once "
    "their leases expire"
)


@dataclass
class Held:
    """A job this process holds a lease on, as its claim thread and heartbeat see it."""

    job: Job
    started: float = 0.0  # monotonic; 0 while claimed but not yet running
    timed_out: bool = False
    done: bool = False  # its task returned; the outcome may still wait in the batch buffer
    lost: bool = False  # the heartbeat found the lease gone (expired and rescued)
    marked: bool = False  # its started marker is written (by the claim, or the heartbeat)
    # Monotonic time the lease is known to run until (from before the claim or the last
    # renewal that got through): past it, another worker may have rescued the job.
    lease_end: float = math.inf


@dataclass
class WorkerStats:
    claimed: int = 0
    started: int = 0  # attempts begun (what recycle_jobs counts)
    succeeded: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    timed_out: int = 0
    unrecorded: int = 0  # outcomes the database never heard of (left to lease expiry)
    by_queue: dict[str, int] = field(default_factory=dict)
    purged: int = 0
    heartbeat_errors: int = 0  # heartbeat rounds that failed outside the database

    def count_recorded(self, outcomes: Sequence[AttemptOutcome], recorded: Sequence[bool]) -> None:
        """Count ``outcomes`` by ``JobManager.finish``'s answer for each: False means fenced
        (the lease expired and the job was rescued), so the outcome is lost, whichever
        thread wrote it."""
        for outcome, ok in zip(outcomes, recorded, strict=True):
            if not ok:
                self.lost += 1
            elif outcome.error is not None:
                self.failed += 1
            else:
                self.succeeded += 1


def rss_mib() -> float:
    """Current resident set size (Linux /proc), else the peak as getrusage reports it."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def confirm_lease(manager: JobManager, job: Job, lease: float) -> float | None:
    """Renew one lease now, before its job starts, when the heartbeat's renewals have not
    kept it ahead: the new ``lease_end``, or None when the lease is gone or the renewal
    failed. Starting the job regardless would run it beside the worker that rescued it."""
    asked = time.monotonic()
    try:
        lost = manager.renew([job], lease)
    except Exception as exc:
        log.warning(
            "job %s: its lease could not be confirmed (%s); not starting it", job.id, summary(exc)
        )
        return None
    return None if lost else asked + lease
