"""The job manager's policy through the real ``JobManager`` code, on each jobs store: the
in-memory one (the unit tier, milliseconds) and, for the same test, SQLite and PostgreSQL,
so the memory store cannot drift from the SQL stores it stands in for."""

from __future__ import annotations

import random

import pytest

from pigeon.exceptions import InvalidState, PayloadInvalid, PermanentError
from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.failed import FailedStore, list_jobs, show_job
from pigeon.jobs.job import FailedJob, JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.jobs.retention import purge_finished
from pigeon.jobs.schedule import Scheduler
from pigeon.jobs.stores import BuiltinStore
from pigeon.jobs.stores.memory import MemoryJobStore
from pigeon.storage.base import Database
from tests.clocks import FakeClock


def make(
    store: Database | BuiltinStore, clock: FakeClock, **app_options: object
) -> tuple[App, JobManager]:
    """An app with queue "q" (backoff 1 s doubling to 8 s, owner team-q) and its task "t",
    and a manager on ``store`` with a seeded jitter."""
    app = App(**app_options)  # type: ignore[arg-type]
    app.queue("q", backoff=Backoff(base=1, cap=8), owner="team-q")
    app.task(lambda **_: None, queue="q", name="t")  # enqueue refuses tasks the app lacks
    return app, JobManager(store, app, clock=clock, rng=random.Random(7))


def test_claim_leases_and_finish_is_compare_and_set(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    _, m = make(any_store, clock)
    job_id = m.enqueue(JobSpec("q", "t", {"n": 1}))
    (job,) = m.lease_jobs("q", "w1", 10, lease=5)
    assert (job.id, job.attempt, job.payload) == (job_id, 1, {"n": 1})
    assert m.lease_jobs("q", "w2", 10, lease=5) == []  # leased: not eligible
    clock.advance(6)  # lease expired: eligible again
    (rescued,) = m.lease_jobs("q", "w2", 10, lease=5)
    assert rescued.attempt == 2 and rescued.token != job.token
    assert m.finish([AttemptOutcome(job)]) == [False]  # the late finisher cannot overwrite
    assert m.finish([AttemptOutcome(rescued)]) == [True]
    info = show_job(any_store, job_id)
    assert info["status"] == "succeeded"
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in info["history"]] == [
        (1, "w1", "lease_expired"),
        (2, "w2", "succeeded"),
    ]


def test_claims_come_in_due_order_and_respect_n(any_store: BuiltinStore, clock: FakeClock) -> None:
    # A batch runs in the order the claim returns it. PostgreSQL sorts by (scheduled_at,
    # id); SQLite's UPDATE ... RETURNING promises no order (in practice by id), so a job due
    # earlier but enqueued later ("second", due before "late") ran after an older one.
    _, m = make(any_store, clock)
    late = m.enqueue(JobSpec("q", "t", {"n": 1}, delay=2))
    first = m.enqueue(JobSpec("q", "t", {"n": 2}))
    second = m.enqueue(JobSpec("q", "t", {"n": 3}))
    assert [j.id for j in m.lease_jobs("q", "w", 1, lease=5)] == [first]
    clock.advance(3)
    assert [j.id for j in m.lease_jobs("q", "w", 5, lease=5)] == [second, late]
    assert m.pressure("q", 10) == (0, None)


def test_renew_keeps_the_lease(any_store: BuiltinStore, clock: FakeClock) -> None:
    _, m = make(any_store, clock)
    m.enqueue(JobSpec("q", "t"))
    (job,) = m.lease_jobs("q", "w1", 1, lease=5)
    for _ in range(4):
        clock.advance(4)
        assert m.renew([job], lease=5) == []
        assert m.lease_jobs("q", "w2", 1, lease=5) == []
    clock.advance(6)
    (rescued,) = m.lease_jobs("q", "w2", 1, lease=5)
    assert m.renew([job], lease=5) == [job]  # the old holder learns it lost the lease
    assert rescued.attempt == 2


def test_retry_with_backoff_then_failed_store_with_owner_and_review(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    alerts: list[FailedJob] = []
    _, m = make(any_store, clock, alert=alerts.append)
    job_id = m.enqueue(JobSpec("q", "t", max_attempts=3))
    for attempt in (1, 2, 3):
        (job,) = m.lease_jobs("q", "w", 1, lease=5)
        assert job.attempt == attempt
        assert m.finish([AttemptOutcome(job, RuntimeError(f"boom {attempt}"))]) == [True]
        delay = show_job(any_store, job_id)["scheduled_at"] - clock()
        if attempt < 3:
            assert 0 <= delay <= min(8, 2 ** (attempt - 1))  # full jitter within the ceiling
        clock.advance(8.01)
    assert m.lease_jobs("q", "w", 1, lease=5) == []
    info = show_job(any_store, job_id)
    assert (info["status"], info["owner"]) == ("failed", "team-q")
    assert "attempts exhausted (3 of 3)" in info["last_error"] and "boom 3" in info["last_error"]
    assert [a["outcome"] for a in info["history"]] == ["error", "error", "failed"]
    assert [(a.id, a.owner) for a in alerts] == [(job_id, "team-q")]

    failed = FailedStore(any_store, clock=clock)
    assert [r["id"] for r in failed.list()] == [job_id]
    failed.retry(job_id, reviewer="ada", reason="provider fixed")
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    assert job.attempt == 4 and job.attempt_base == 3  # a fresh budget
    assert m.finish([AttemptOutcome(job, RuntimeError("again"))]) == [True]
    assert show_job(any_store, job_id)["status"] == "queued"  # retried within the new budget
    failed.cancel(job_id, reviewer="ada", reason="give up")
    with pytest.raises(InvalidState):
        failed.retry(job_id, reviewer="ada", reason="no")
    assert [r["action"] for r in show_job(any_store, job_id)["reviews"]] == ["retry", "cancel"]


def test_backoff_is_full_jitter_within_ceiling(any_store: BuiltinStore, clock: FakeClock) -> None:
    _, m = make(any_store, clock)
    m.enqueue(JobSpec("q", "t", max_attempts=10))
    for attempt in range(1, 6):  # the ceiling doubles from 1 s up to the cap, 8 s
        (job,) = m.lease_jobs("q", "w", 1, lease=5)
        m.finish([AttemptOutcome(job, RuntimeError("x"))])
        (row,) = list_jobs(any_store, queue="q")
        delay = row["scheduled_at"] - clock()
        assert 0 <= delay <= min(8, 2 ** (attempt - 1))
        clock.advance(8.01)  # beyond the cap: always ready again


def test_permanent_errors_fail_at_once(any_store: BuiltinStore, clock: FakeClock) -> None:
    # PermanentError is permanent by default (App(permanent=...)), KeyError by the task's own.
    app, m = make(any_store, clock)
    app.task(lambda: None, queue="q", name="p", permanent=(KeyError,))
    a = m.enqueue(JobSpec("q", "p"))
    b = m.enqueue(JobSpec("q", "p"))
    ja, jb = m.lease_jobs("q", "w", 2, lease=5)
    assert m.finish(
        [AttemptOutcome(ja, PermanentError("declined")), AttemptOutcome(jb, KeyError("x"))]
    ) == [
        True,
        True,
    ]
    assert show_job(any_store, a)["status"] == show_job(any_store, b)["status"] == "failed"
    assert "permanent error" in show_job(any_store, b)["last_error"]


def test_total_age_limit(any_store: BuiltinStore, clock: FakeClock) -> None:
    _, m = make(any_store, clock)
    job_id = m.enqueue(JobSpec("q", "t", max_attempts=100, max_age=60))
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    clock.advance(61)
    m.finish([AttemptOutcome(job, RuntimeError("slow"))])
    assert "older than its max age" in show_job(any_store, job_id)["last_error"]


def test_a_lease_lost_on_the_last_attempt_fails_at_the_claim(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    alerts: list[FailedJob] = []
    _, m = make(any_store, clock, alert=alerts.append)
    job_id = m.enqueue(JobSpec("q", "t", max_attempts=1))
    m.lease_jobs("q", "w1", 1, lease=5)
    clock.advance(6)
    assert m.lease_jobs("q", "w2", 1, lease=5) == []
    info = show_job(any_store, job_id)
    assert info["status"] == "failed" and "lease expired on its last attempt" in info["last_error"]
    assert [a.id for a in alerts] == [job_id]


def test_release_refunds_the_attempt_and_announces_the_queue(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    _, m = make(any_store, clock)
    m.enqueue(JobSpec("q", "t", max_attempts=1))
    (job,) = m.lease_jobs("q", "w", 1, lease=5)
    assert m.release([job]) == 1
    if isinstance(any_store, MemoryJobStore):  # SQLite's workers poll; PostgreSQL NOTIFYs
        assert any_store.announced == ["q"]
    (again,) = m.lease_jobs("q", "w", 1, lease=5)
    assert again.attempt == 1
    assert m.finish([AttemptOutcome(again)]) == [True]  # its one attempt is still its own


def test_scoped_payload_fields_are_refused_at_enqueue(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    app, m = make(any_store, clock)
    app.task(lambda answer_id: None, queue="q", name="grade", fields=("answer_id",))
    with pytest.raises(PayloadInvalid, match="answer"):
        m.enqueue(JobSpec("q", "grade", {"answer_id": "1", "answer": "secret"}))
    assert list_jobs(any_store) == []  # nothing written


def test_a_transaction_that_raises_leaves_nothing(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    _, m = make(any_store, clock)
    with pytest.raises(RuntimeError), any_store.transaction() as session:
        enqueue(session.tx, JobSpec("q", "t"), now=clock())
        raise RuntimeError("roll back")
    assert list_jobs(any_store) == [] and m.lease_jobs("q", "w", 1, lease=5) == []


def test_unique_keys_schedules_and_retention(any_store: BuiltinStore, clock: FakeClock) -> None:
    app, m = make(any_store, clock)
    with any_store.transaction() as session:  # the second insert sees the first, uncommitted
        a = enqueue(session.tx, queue="q", task="t", unique_key="k", now=clock())
        assert enqueue(session.tx, queue="q", task="t", unique_key="k", now=clock()) == a
    assert m.enqueue(JobSpec("q", "t", unique_key="k")) == a  # and a later transaction does
    assert len(list_jobs(any_store)) == 1
    app.periodic(every=60, task="t", name="tick")
    scheduler = Scheduler(app, any_store, clock=clock)
    assert len(scheduler.tick_once()) == 1
    assert scheduler.tick_once() == []  # one run per tick
    for job in m.lease_jobs("q", "w", 5, lease=5):
        m.finish([AttemptOutcome(job)])
    clock.advance(3600)
    assert purge_finished(any_store, 60, clock=clock) == 2
    assert list_jobs(any_store) == []
