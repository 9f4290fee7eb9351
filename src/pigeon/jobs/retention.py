"""Retention of finished jobs: succeeded and cancelled jobs, with their attempts and
reviews, are deleted once older than the retention (a week by default), in bounded
batches of one short transaction each, so a purge never holds the write lock (SQLite) or
many row locks (PostgreSQL) for long, and workers keep claiming in between.

Failed jobs wait in the failed store for review and are never purged here; records,
obligations and their events stay too: the ledger outlives the jobs that served it. A
job purged with its ``unique_key`` frees the key (a schedule's ticks stay in their own
table, so a purged tick is not run again).

A schedule's ticks are purged after the same retention (``purge_ticks``): only the
current tick of a schedule is ever taken, so an older row only records what ran, and a
tick is never taken twice unless the clock goes back by more than the retention. Ticks of
a schedule no longer declared in the app are left alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import Schedule
from pigeon.jobs.store import JobStore, MaintenanceSession
from pigeon.jobs.stores import store_for
from pigeon.storage.base import Database

DEFAULT_BATCH = 500


def purge_finished(
    db: Database | JobStore[MaintenanceSession],
    older_than: float,
    *,
    batch: int = DEFAULT_BATCH,
    max_batches: int | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Delete finished jobs that ended more than ``older_than`` seconds ago; returns how
    many. Stops after ``max_batches`` batches (None: until none is left)."""
    if not older_than > 0:
        raise ConfigurationError(f"retention must be > 0 seconds, got {older_than}")
    if batch < 1:
        raise ConfigurationError(f"purge batch must be >= 1, got {batch}")
    store: JobStore[MaintenanceSession] = store_for(db)
    before = clock() - older_than
    total = 0
    done = 0
    while max_batches is None or done < max_batches:
        with store.transaction() as session:
            purged = session.purge_finished(before=before, limit=batch)
        total += purged
        done += 1
        if purged < batch:
            break
    return total


def purge_ticks(
    db: Database | JobStore[MaintenanceSession],
    schedules: Iterable[Schedule],
    older_than: float,
    *,
    batch: int = DEFAULT_BATCH,
    max_batches: int | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Delete the ticks of ``schedules`` older than ``older_than`` seconds, at most
    ``batch`` ticks per short transaction and ``max_batches`` per schedule (None: all);
    returns how many. Without it the ticks table grows by one row per period forever."""
    if not older_than > 0:
        raise ConfigurationError(f"retention must be > 0 seconds, got {older_than}")
    store: JobStore[MaintenanceSession] = store_for(db)
    now = clock()
    total = 0
    for schedule in schedules:
        before_tick = math.floor((now - older_than) / schedule.every)
        done = 0
        while max_batches is None or done < max_batches:
            # Each batch takes at least the oldest tick while one is old enough: a batch
            # smaller than ``batch`` (ticks missed while no worker ran) is not the end.
            with store.transaction() as session:
                purged = session.purge_ticks(
                    schedule=schedule.name, before_tick=before_tick, limit=batch
                )
            total += purged
            done += 1
            if not purged:
                break
    return total
