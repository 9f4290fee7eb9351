"""Periodic schedules: every tick runs once across all workers and nodes.

Each worker process's scheduler tries to insert the row (schedule, tick); the primary key
lets exactly one insert win, and the winner enqueues the tick's job in the same
transaction. A tick missed while no worker was up is not run late: only the current one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from pigeon.jobs.app import App, Schedule
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import write_job
from pigeon.jobs.store import JobStore, MaintenanceSession
from pigeon.jobs.stores import store_for
from pigeon.storage.base import Database

log = logging.getLogger("pigeon.jobs.schedule")


class Scheduler:
    def __init__(
        self,
        app: App,
        db: Database | JobStore[MaintenanceSession],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.db = db
        self.store: JobStore[MaintenanceSession] = store_for(db)
        self.clock = clock

    def tick_once(self) -> list[tuple[str, int]]:
        """Enqueue the current tick of every schedule no other worker has taken yet.

        A schedule whose tick cannot be enqueued (its task is gone, its payload does not
        fit the task, the database refused) is logged and left untaken, to be tried again
        on the next pass; the schedules after it still run: one broken schedule must not
        keep every schedule declared after it from ever running."""
        won = []
        now = self.clock()
        for schedule in self.app.schedules.values():
            tick = math.floor(now / schedule.every)
            try:
                taken = self._take(schedule, tick, now)
            except Exception:
                log.exception("schedule %r: tick %d could not be enqueued", schedule.name, tick)
                continue
            if taken:
                won.append((schedule.name, tick))
        return won

    def _take(self, schedule: Schedule, tick: int, now: float) -> bool:
        task = self.app.get_task(schedule.task)
        with self.store.transaction() as session:
            if not session.take_tick(schedule.name, tick, now):
                return False
            payload = dict(schedule.payload)
            job_id = write_job(
                session,
                JobSpec(
                    task.queue,
                    task.name,
                    payload,
                    unique_key=f"schedule:{schedule.name}:{tick}",
                ),
                now=now,
                app=self.app,  # the task's own retry policy: max_attempts and max_age
            )
            session.set_tick_job(schedule.name, tick, job_id)
        return True

    def run(self, stop: threading.Event) -> None:
        period = min(s.every for s in self.app.schedules.values())
        while not stop.is_set():
            try:
                self.tick_once()
            except Exception:
                log.exception("schedule tick failed")
            stop.wait(min(1.0, period / 4))
