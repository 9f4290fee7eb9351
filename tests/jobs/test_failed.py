from __future__ import annotations

import random

import pytest

from pigeon.exceptions import InvalidOperation, InvalidState, JobTimeout, NotFound
from pigeon.jobs import records
from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.failed import FailedStore, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.base import Database
from tests.clocks import FakeClock


def _fail_one(db: Database, clock: FakeClock) -> tuple[JobManager, int, str]:
    m = JobManager(db, clock=clock)
    with db.transaction() as tx:
        rid = records.accept(
            tx,
            kind="answer",
            data={"a": 1},
            obligations={"grading": JobSpec("q", "grade", max_attempts=1)},
            now=clock(),
        )
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    m.finish([AttemptOutcome(job, RuntimeError("grader down"))])
    return m, job.id, rid


def test_reviewed_retry_gives_fresh_budget_and_records_reviewer(
    db: Database, clock: FakeClock
) -> None:
    m, job_id, rid = _fail_one(db, clock)
    store = FailedStore(db, clock=clock)
    (failed,) = store.list()
    assert failed["id"] == job_id and failed["owner"] == "operations"
    assert records.get(db, rid)["obligations"]["grading"]["status"] == "failed"
    clock.advance(100)
    store.retry(job_id, reviewer="ana", reason="grader fixed")
    assert records.get(db, rid)["pending"] == ["grading"]
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    assert job.attempt == 2  # history kept: attempt numbers keep counting
    assert m.finish([AttemptOutcome(job)]) == [True]
    info = show_job(db, job_id)
    assert [a["outcome"] for a in info["history"]] == ["failed", "succeeded"]
    assert [(r["action"], r["reviewer"], r["reason"]) for r in info["reviews"]] == [
        ("retry", "ana", "grader fixed")
    ]
    assert records.get(db, rid)["status"] == "completed"


def test_cancel_closes_the_obligation(db: Database, clock: FakeClock) -> None:
    _, job_id, rid = _fail_one(db, clock)
    store = FailedStore(db, clock=clock)
    store.cancel(job_id, reviewer="ana", reason="duplicate answer")
    assert show_job(db, job_id)["status"] == "cancelled"
    assert records.get(db, rid)["obligations"]["grading"]["status"] == "cancelled"
    with pytest.raises(InvalidState, match="cancelled; cannot retry"):
        store.retry(job_id, reviewer="ana", reason="oops")


def test_review_needs_reason_and_existing_job(db: Database, clock: FakeClock) -> None:
    _, job_id, _ = _fail_one(db, clock)
    store = FailedStore(db, clock=clock)
    with pytest.raises(InvalidOperation, match="reason"):
        store.retry(job_id, reviewer="ana", reason=" ")
    with pytest.raises(NotFound, match="no job 999"):
        store.cancel(999, reviewer="ana", reason="x")


class _Ceiling(random.Random):
    """Full jitter drawn at its ceiling: the delay shows which attempt the backoff counted."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_a_reviewed_retry_backs_off_from_a_fresh_start(db: Database, clock: FakeClock) -> None:
    # A retry after a review gives the job a fresh attempt budget; its backoff starts over
    # with it. Counting every attempt since enqueue, the first failure after the review
    # waited as the 5th failure would (16x the first delay here; the cap after a few
    # reviews), though the job had failed once in its new budget.
    app = App()
    app.queue("q", backoff=Backoff(base=10, cap=100_000))
    app.task(lambda: None, queue="q", name="t", max_attempts=4)
    m = JobManager(db, app, clock=clock, rng=_Ceiling())
    job_id = m.enqueue(JobSpec("q", "t"))
    delays = []
    for _ in range(4):
        (job,) = m.lease_jobs("q", "w", 1, lease=5)
        m.finish([AttemptOutcome(job, RuntimeError("down"))])
        row = show_job(db, job_id)
        if row["status"] == "queued":
            delays.append(row["scheduled_at"] - clock())
            clock.advance(delays[-1])
    assert delays == [10, 20, 40]
    assert show_job(db, job_id)["status"] == "failed"
    FailedStore(db, clock=clock).retry(job_id, reviewer="ana", reason="fixed upstream")
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    assert job.attempt == 5  # history keeps counting
    m.finish([AttemptOutcome(job, RuntimeError("still down"))])
    assert show_job(db, job_id)["scheduled_at"] - clock() == 10  # attempt 1 of the new budget


def test_a_reviewed_retry_of_a_timed_out_job_waits_until_its_process_is_abandoned(
    db: Database, clock: FakeClock
) -> None:
    # A job over its timeout is recorded by the heartbeat while its task may still be
    # running; a retry waits for its process to be abandoned (AttemptOutcome.not_before). When
    # that was its last attempt it lands in the failed store instead, and a reviewer's
    # retry must wait just the same, or the job runs beside the stuck original.
    m = JobManager(db, clock=clock)
    job_id = m.enqueue(JobSpec("q", "t", max_attempts=1))
    (job,) = m.lease_jobs("q", "w", 1, lease=60)
    clock.advance(30)
    abandoned_by = clock() + 20
    timed_out = AttemptOutcome(
        job, JobTimeout("ran 30s, over its 29s timeout"), not_before=abandoned_by
    )
    assert m.finish([timed_out]) == [True]
    assert show_job(db, job_id)["status"] == "failed"
    FailedStore(db, clock=clock).retry(job_id, reviewer="ana", reason="looks transient")
    assert m.lease_jobs("q", "w", 1, lease=60) == []  # the original may still be running
    clock.advance(21)
    (again,) = m.lease_jobs("q", "w", 1, lease=60)
    assert again.id == job_id
