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
from pigeon.jobs import ledger
from pigeon.jobs._db import loads, reading, rowcount
from pigeon.jobs.job import JobId
from pigeon.storage.base import Database, Row, Tx
from pigeon.storage.sealed import ATTEMPT_ERROR, JOB_ERROR, JOB_PAYLOAD


class FailedStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    def list(self, *, queue: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return list_jobs(self.db, status="failed", queue=queue, limit=limit)

    def show(self, job_id: JobId) -> dict[str, Any]:
        return show_job(self.db, job_id)

    def retry(self, job_id: JobId, *, reviewer: str, reason: str) -> None:
        """Queue a failed job again with fresh attempt and age budgets."""
        self._review(job_id, "retry", "job_review_retry", reviewer, reason, "pending")

    def cancel(self, job_id: JobId, *, reviewer: str, reason: str) -> None:
        """Close a failed (or still queued) job for good; its obligation is cancelled."""
        self._review(job_id, "cancel", "job_review_cancel", reviewer, reason, "cancelled")

    def _review(
        self, job_id: JobId, action: str, query: str, reviewer: str, reason: str, obligation: str
    ) -> None:
        if not reviewer.strip():
            raise InvalidOperation(f"a {action} needs a reviewer")
        if not reason.strip():
            raise InvalidOperation(f"a {action} needs a reason")
        now = self.clock()
        with self.db.transaction() as tx:
            job = tx.fetchone("job_get", {"id": job_id})
            if job is None:
                raise NotFound(f"no job {job_id}")
            if not rowcount(tx.execute(query, {"id": job_id, "now": now})):
                raise InvalidState(f"job {job_id} is {job['status']}; cannot {action} it")
            if action == "retry" and tx.backend == "postgres":
                tx.execute("job_notify", {"queue": job["queue"]})  # wake idle workers
            tx.execute(
                "job_review_insert",
                {
                    "job_id": job_id,
                    "action": action,
                    "reviewer": reviewer,
                    "reason": reason,
                    "now": now,
                },
            )
            if job["record_id"] and job["obligation"]:
                ledger.settle_obligation(
                    tx,
                    job["record_id"],
                    job["obligation"],
                    obligation,
                    {"job_id": job_id, "reviewer": reviewer, "reason": reason},
                    now=now,
                )


def list_jobs(
    db: Database, *, status: str | None = None, queue: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    with reading(db) as tx:
        rows = tx.fetchall("job_list", {"status": status, "queue": queue, "limit": limit})
        for row in rows:
            _open_job(tx, row)
    return rows


def _open_job(tx: Tx, row: Row) -> None:
    """A job row's payload (decoded) and last error, opened where they are sealed."""
    row["payload"] = loads(tx.cipher.open(row["payload"], *JOB_PAYLOAD.ad, row["task"]))
    row["last_error"] = tx.cipher.open(row["last_error"], *JOB_ERROR.ad, str(row["id"]))


def show_job(db: Database, job_id: JobId) -> dict[str, Any]:
    with reading(db) as tx:
        job = tx.fetchone("job_get", {"id": job_id})
        if job is None:
            raise NotFound(f"no job {job_id}")
        _open_job(tx, job)
        job["history"] = tx.fetchall("job_attempts", {"job_id": job_id})
        for attempt in job["history"]:
            attempt["error"] = tx.cipher.open(
                attempt["error"], *ATTEMPT_ERROR.ad, str(job_id), str(attempt["attempt"])
            )
        job["reviews"] = tx.fetchall("job_reviews", {"job_id": job_id})
    return job
