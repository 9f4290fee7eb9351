"""The failed store: jobs that exhausted their budget or failed permanently, each with its
history, last error and owner, and the two ways out: a reviewed retry or a cancel.

A row written is not recovery: a retry records who reviewed it and why, and gives the job
a fresh attempt and age budget; a cancel records the same and closes the obligation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pigeon.exceptions import InvalidOperation, InvalidState, NotFound
from pigeon.jobs.job import JobId
from pigeon.jobs.rows import loads
from pigeon.jobs.store import FailedSession, JobStore
from pigeon.jobs.stores import store_for
from pigeon.storage.base import Database


class FailedStore:
    def __init__(
        self, db: Database | JobStore[FailedSession], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.db = db
        self.store: JobStore[FailedSession] = store_for(db)
        self.clock = clock

    def list(self, *, queue: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return list_jobs(self.store, status="failed", queue=queue, limit=limit)

    def show(self, job_id: JobId) -> dict[str, Any]:
        return show_job(self.store, job_id)

    def retry(self, job_id: JobId, *, reviewer: str, reason: str) -> None:
        """Queue a failed job again with fresh attempt and age budgets."""
        self._review(job_id, "retry", reviewer, reason, "pending")

    def cancel(self, job_id: JobId, *, reviewer: str, reason: str) -> None:
        """Close a failed (or still queued) job for good; its obligation is cancelled."""
        self._review(job_id, "cancel", reviewer, reason, "cancelled")

    def _review(
        self, job_id: JobId, action: str, reviewer: str, reason: str, obligation: str
    ) -> None:
        if not reviewer.strip():
            raise InvalidOperation(f"a {action} needs a reviewer")
        if not reason.strip():
            raise InvalidOperation(f"a {action} needs a reason")
        now = self.clock()
        with self.store.transaction() as session:
            job = session.get_job(job_id)
            if job is None:
                raise NotFound(f"no job {job_id}")
            if not session.review(job_id, action, now):
                raise InvalidState(f"job {job_id} is {job['status']}; cannot {action} it")
            if action == "retry":
                session.notify_ready(job["queue"])  # wake idle workers
            session.record_review(job_id, action=action, reviewer=reviewer, reason=reason, now=now)
            if job["record_id"] and job["obligation"]:
                session.settle_obligation(
                    job["record_id"],
                    job["obligation"],
                    obligation,
                    {"job_id": job_id, "reviewer": reviewer, "reason": reason},
                    now,
                )


def list_jobs(
    db: Database | JobStore[FailedSession],
    *,
    status: str | None = None,
    queue: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    with store_for(db).reading() as session:
        rows = session.list_jobs(status=status, queue=queue, limit=limit)
    return [{**row, "payload": loads(row["payload"])} for row in rows]


def show_job(db: Database | JobStore[FailedSession], job_id: JobId) -> dict[str, Any]:
    with store_for(db).reading() as session:
        job = session.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        history = session.attempts_of(job_id)
        reviews = session.reviews_of(job_id)
    return {**job, "payload": loads(job["payload"]), "history": history, "reviews": reviews}
