"""The job manager on the server database, SQLite then PostgreSQL. The policy it shares
with every jobs store (claims and their compare-and-set, renewals, backoff, the failed
store, permanent errors, age limits, releases, unique keys, due order) is tested on the
memory, SQLite and PostgreSQL stores alike in tests/unit/jobs/test_manager_policy.py."""

from __future__ import annotations

import pytest

from pigeon.exceptions import PermanentError
from pigeon.jobs import records
from pigeon.jobs.failed import show_job
from pigeon.jobs.job import DEFAULT_MAX_ATTEMPTS, FailedJob, JobSpec
from pigeon.jobs.manager import AttemptOutcome
from pigeon.storage.base import Database
from tests.clocks import FakeClock
from tests.unit.jobs.test_manager_policy import make


def test_a_late_permanent_failure_does_not_rewrite_a_rescued_jobs_history(
    db: Database, clock: FakeClock
) -> None:
    _, m = make(db, clock, permanent=(PermanentError,))
    job_id = m.enqueue(JobSpec("q", "t"))
    (job,) = m.lease_jobs("q", "w1", 1, lease=5)
    clock.advance(6)
    (rescued,) = m.lease_jobs("q", "w2", 1, lease=5)
    # The first holder comes back with a permanent error, after losing its lease.
    assert m.finish([AttemptOutcome(job, PermanentError("bad input"))]) == [False]
    assert m.finish([AttemptOutcome(rescued)]) == [True]
    info = show_job(db, job_id)
    assert info["status"] == "succeeded"
    assert [(a["attempt"], a["outcome"]) for a in info["history"]] == [
        (1, "lease_expired"),
        (2, "succeeded"),
    ]


def test_delayed_jobs_are_not_ready(db: Database, clock: FakeClock) -> None:
    _, m = make(db, clock)
    m.enqueue(JobSpec("q", "t", delay=30))
    assert m.lease_jobs("q", "w", 5, lease=5) == []
    with db.transaction() as tx:
        (stats,) = tx.fetchall("job_queue_stats", {"now": clock()})
    assert (stats["ready"], stats["delayed"]) == (0, 1)
    clock.advance(31)
    assert len(m.lease_jobs("q", "w", 5, lease=5)) == 1


def test_bad_spec_is_refused() -> None:
    from pigeon.exceptions import InvalidOperation, PayloadNotSerializable

    with pytest.raises(InvalidOperation, match="max_attempts"):
        JobSpec("q", "t", max_attempts=0)
    with pytest.raises(PayloadNotSerializable, match="q/t"):
        JobSpec("q", "t", {"x": object()}).payload_json()


def test_an_alert_hook_that_raises_never_loses_the_claim(
    db: Database, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # The hook runs after the claim committed: if it raised out of claim(), the worker
    # would never see the job it now holds, and max_attempts=1 would fail it unrun.
    seen: list[int] = []

    def pager_down(failed: FailedJob) -> None:
        seen.append(failed.id)
        raise RuntimeError("pager down")

    _, m = make(db, clock, alert=pager_down)
    old = m.enqueue(JobSpec("q", "t", max_age=10))
    other = m.enqueue(JobSpec("q", "t", max_age=10))
    good = m.enqueue(JobSpec("q", "t", max_attempts=1))
    clock.advance(20)  # old and other are past their max age: claim fails and alerts them
    (job,) = m.lease_jobs("q", "w", 5, lease=60)
    assert job.id == good
    assert seen == [old, other]  # one failing call does not silence the next
    assert caplog.text.count("alert hook failed") == 2
    # finish() too: the failure is recorded, the hook's error only logged
    job_id = m.enqueue(JobSpec("q", "t", max_attempts=1))
    (doomed,) = m.lease_jobs("q", "w", 5, lease=60)
    assert m.finish([AttemptOutcome(job, None), AttemptOutcome(doomed, RuntimeError("x"))]) == [
        True,
        True,
    ]
    assert show_job(db, good)["status"] == "succeeded"
    assert show_job(db, job_id)["status"] == "failed" and seen[-1] == job_id


def test_a_tasks_retry_policy_applies_unless_the_spec_gives_its_own(
    db: Database, clock: FakeClock
) -> None:
    app, m = make(db, clock)
    app.task(lambda: None, queue="q", name="charge", max_attempts=1, max_age=5)
    app.task(lambda: None, queue="q", name="plain")
    policy = m.enqueue(JobSpec("q", "charge"))
    own = m.enqueue(JobSpec("q", "charge", max_attempts=3, max_age=None))
    default = m.enqueue(JobSpec("q", "plain"))
    stored = {
        j: (show_job(db, j)["max_attempts"], show_job(db, j)["max_age"])
        for j in (policy, own, default)
    }
    assert stored == {policy: (1, 5), own: (3, None), default: (DEFAULT_MAX_ATTEMPTS, None)}
    # the task's single attempt is all it gets: one failure lands it in the failed store
    job = next(j for j in m.lease_jobs("q", "w", 3, lease=5) if j.id == policy)
    m.finish([AttemptOutcome(job, RuntimeError("boom"))])
    assert "attempts exhausted (1 of 1)" in show_job(db, policy)["last_error"]


def test_records_take_the_tasks_retry_policy_from_the_app(db: Database, clock: FakeClock) -> None:
    app, _ = make(db, clock)
    app.task(lambda: None, queue="q", name="charge", max_attempts=2, max_age=30)
    with db.transaction() as tx:
        rid = records.accept(
            tx, kind="k", data={}, obligations={"c": JobSpec("q", "charge")}, app=app
        )
    job_id = records.get(db, rid)["obligations"]["c"]["job_id"]
    assert (show_job(db, job_id)["max_attempts"], show_job(db, job_id)["max_age"]) == (2, 30)


def test_a_delayed_jobs_age_limit_counts_from_when_it_is_due(
    db: Database, clock: FakeClock
) -> None:
    # "Give up after trying for a minute", asked of a job due in an hour: the minute
    # begins when the job is due. Counted from enqueue, the job was already over its
    # max age when first claimed and failed without ever running.
    _, m = make(db, clock)
    job_id = m.enqueue(JobSpec("q", "t", delay=3600, max_age=60))
    clock.advance(3600)
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    clock.advance(30)
    assert m.finish([AttemptOutcome(job, RuntimeError("flaky"))]) == [True]
    assert show_job(db, job_id)["status"] == "queued"  # 30 s into its minute: retried
    clock.advance(31)  # past the minute: the next claim gives up on it
    assert m.lease_jobs("q", "w", 1, lease=5) == []
    assert "older than its max age (61.0s > 60s)" in show_job(db, job_id)["last_error"]
