"""Bad input to enqueue is refused with a typed error and nothing stored; a stored payload
that cannot bind to its task fails permanently at run time instead of being retried."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pigeon.exceptions import ConfigurationError, InvalidOperation, PayloadNotSerializable
from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.storage.base import Database
from tests.clocks import FakeClock


def make(db: Database, clock: FakeClock) -> tuple[App, JobManager]:
    app = App(retention=None)
    app.queue("grading", backoff=Backoff(base=1, cap=8))

    @app.task(queue="grading")
    def grade(answer_id: int, expected: Any = None) -> None:
        pass

    return app, JobManager(db, app, clock=clock)


BAD: list[tuple[str, Any, type[Exception], str]] = [
    ("unknown task", lambda: JobSpec("grading", "nosuch", {}), InvalidOperation, "no task"),
    (
        "another queue",
        lambda: JobSpec("elsewhere", "grade", {"answer_id": 1}),
        InvalidOperation,
        "runs on queue 'grading'",
    ),
    ("list payload", lambda: JobSpec("grading", "grade", [1, 2]), InvalidOperation, "JSON object"),
    ("int keys", lambda: JobSpec("grading", "grade", {1: 2}), InvalidOperation, "str keys"),
    (
        "unknown argument",
        lambda: JobSpec("grading", "grade", {"nope": 1}),
        InvalidOperation,
        "does not fit task 'grade'",
    ),
    (
        "missing argument",
        lambda: JobSpec("grading", "grade", {"expected": 1}),
        InvalidOperation,
        "answer_id",
    ),
    (
        "NaN in payload",
        lambda: JobSpec("grading", "grade", {"answer_id": math.nan}),
        PayloadNotSerializable,
        "not JSON",
    ),
    (
        "inf nested in payload",
        lambda: JobSpec("grading", "grade", {"answer_id": 1, "expected": [math.inf]}),
        PayloadNotSerializable,
        "not JSON",
    ),
    (
        "delay NaN",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, delay=math.nan),
        InvalidOperation,
        "delay",
    ),
    (
        "delay inf",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, delay=math.inf),
        InvalidOperation,
        "delay",
    ),
    (
        "max_age NaN",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, max_age=math.nan),
        InvalidOperation,
        "max_age",
    ),
    (
        "max_age inf",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, max_age=math.inf),
        InvalidOperation,
        "max_age",
    ),
    (
        "max_attempts float",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, max_attempts=2.5),
        InvalidOperation,
        "max_attempts",
    ),
    (
        "max_attempts str",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, max_attempts="3"),
        InvalidOperation,
        "max_attempts",
    ),
    (
        "max_attempts bool",
        lambda: JobSpec("grading", "grade", {"answer_id": 1}, max_attempts=True),
        InvalidOperation,
        "max_attempts",
    ),
]


@pytest.mark.parametrize(("label", "spec", "error", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_nothing_is_stored(
    db: Database, clock: FakeClock, label: str, spec: Any, error: type[Exception], match: str
) -> None:
    app, m = make(db, clock)
    with pytest.raises(error, match=match):
        m.enqueue(spec())
    assert list_jobs(db) == []
    assert list(app.queues) == ["grading"]  # a refused enqueue declares no queue either


def test_a_good_spec_still_goes_through(db: Database, clock: FakeClock) -> None:
    _, m = make(db, clock)
    job_id = m.enqueue(JobSpec("grading", "grade", {"answer_id": 1, "expected": 2}))
    assert show_job(db, job_id)["status"] == "queued"


@pytest.mark.parametrize(
    "policy",
    [{"max_attempts": 0}, {"max_attempts": 1.5}, {"max_age": math.nan}, {"max_age": -1}],
)
def test_a_tasks_bad_retry_policy_is_a_configuration_error(policy: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        App().task(lambda: None, name="t", **policy)


@pytest.mark.parametrize("payload", [{"nope": 1}, {}])
def test_a_payload_that_does_not_bind_fails_permanently_at_run_time(
    db: Database, clock: FakeClock, payload: dict[str, Any]
) -> None:
    # A producer without the app (module-level enqueue) cannot check the payload; the
    # worker's TypeError is then permanent: the failed store at once, not minutes of retries.
    app, m = make(db, clock)
    with db.transaction() as tx:
        job_id = enqueue(tx, JobSpec("grading", "grade", payload), now=clock())
    (job,) = m.lease_jobs("grading", "w", 1, lease=30)
    try:
        app.get_task("grade").func(**job.payload)
    except TypeError as exc:
        error = exc
    assert m.finish([AttemptOutcome(job, error)]) == [True]
    info = show_job(db, job_id)
    assert info["status"] == "failed" and info["attempts"] == 1
    assert "permanent error" in info["last_error"]
    assert "does not fit task 'grade'" in info["last_error"]


def test_a_type_error_inside_a_task_whose_payload_binds_is_still_retried(
    db: Database, clock: FakeClock
) -> None:
    _, m = make(db, clock)
    job_id = m.enqueue(JobSpec("grading", "grade", {"answer_id": 1}))
    (job,) = m.lease_jobs("grading", "w", 1, lease=30)
    m.finish([AttemptOutcome(job, TypeError("a bug in the task, maybe a flaky dependency"))])
    assert show_job(db, job_id)["status"] == "queued"


def test_a_scheduled_job_takes_its_tasks_whole_retry_policy(db: Database, clock: FakeClock) -> None:
    from pigeon.jobs.schedule import Scheduler

    app = App(retention=None)
    app.queue("reports")

    @app.task(queue="reports", max_attempts=2, max_age=30.0)
    def nightly() -> None:
        pass

    app.periodic(every=60.0, task="nightly")
    assert Scheduler(app, db, clock=clock).tick_once()
    [job] = list_jobs(db, limit=10)
    stored = show_job(db, job["id"])
    assert (stored["max_attempts"], stored["max_age"]) == (2, 30.0)  # max_age was dropped
