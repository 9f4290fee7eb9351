"""The worker's policy on the in-memory store: the real ``Worker`` (threads, heartbeat,
batches, the access re-check), no database."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.job import Job, JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.stores.memory import MemoryJobStore
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import Worker
from tests.waiting import wait_for


def run(app: App, store: MemoryJobStore, done: Callable[[], bool]) -> Worker:
    worker = Worker(
        app, store, {"q": 2}, WorkerOptions(poll=0.01, poll_max=0.02, control_every=0.05)
    )
    worker.start()
    try:
        wait_for(done)
    finally:
        worker.stop()
        assert worker.join(5)
    return worker


def statuses(store: MemoryJobStore) -> list[str]:
    return sorted(r["status"] for r in store.jobs())


def test_a_worker_runs_jobs_and_retries_a_failing_one() -> None:
    app = App()
    app.queue("q", backoff=Backoff(base=0.01, cap=0.01))
    ran: list[int] = []
    tries: list[int] = []

    @app.task(queue="q")
    def work(n: int) -> None:
        ran.append(n)

    @app.task(queue="q", max_attempts=3)
    def flaky() -> None:
        tries.append(1)
        if len(tries) < 2:
            raise RuntimeError("once")

    store = MemoryJobStore()
    m = JobManager(store, app)
    for n in range(20):
        m.enqueue(JobSpec("q", "work", {"n": n}))
    m.enqueue(JobSpec("q", "flaky"))
    worker = run(app, store, lambda: statuses(store) == ["succeeded"] * 21)
    assert sorted(ran) == list(range(20)) and len(tries) == 2
    assert worker.stats.succeeded == 21 and worker.stats.failed == 1


def test_a_permanent_failure_lands_in_the_failed_store_with_its_owner() -> None:
    app = App(default_owner="ops")
    app.queue("q")

    @app.task(queue="q", permanent=(ValueError,))
    def bad() -> None:
        raise ValueError("never")

    store = MemoryJobStore()
    job_id = JobManager(store, app).enqueue(JobSpec("q", "bad"))
    run(app, store, lambda: statuses(store) == ["failed"])
    row = store.job(job_id)
    assert row["owner"] == "ops" and "permanent error" in row["last_error"]
    assert row["attempts"] == 1


def test_undeclared_payload_fields_from_a_producer_without_the_app_fail_permanently() -> None:
    app = App()
    app.queue("q")
    ran: list[Any] = []

    @app.task(queue="q", fields=("answer_id",))
    def grade(answer_id: str, **_: Any) -> None:
        ran.append(answer_id)

    store = MemoryJobStore()
    # A producer without the app writes what it is given.
    job_id = JobManager(store).enqueue(JobSpec("q", "grade", {"answer_id": "1", "answer": "x"}))
    run(app, store, lambda: statuses(store) == ["failed"])
    assert ran == [] and "answer" in store.job(job_id)["last_error"]


def test_the_access_re_check_refuses_a_revoked_principal_without_retrying() -> None:
    app = App()
    app.queue("q")
    revoked = {"mallory"}
    ran: list[str] = []

    def still_allowed(tx: Any, job: Job) -> str | None:
        return "revoked" if job.payload["who"] in revoked else None

    @app.task(queue="q", access=still_allowed, max_attempts=5)
    def act(who: str) -> None:
        ran.append(who)

    store = MemoryJobStore()
    m = JobManager(store, app)
    ok = m.enqueue(JobSpec("q", "act", {"who": "alice"}))
    refused = m.enqueue(JobSpec("q", "act", {"who": "mallory"}))
    run(app, store, lambda: statuses(store) == ["failed", "succeeded"])
    assert ran == ["alice"] and store.job(ok)["status"] == "succeeded"
    row = store.job(refused)
    assert row["attempts"] == 1 and "access re-check" in row["last_error"]


def test_a_job_over_its_timeout_is_recorded_and_retried_after_the_lease() -> None:
    app = App()
    app.queue("q", timeouts=Timeouts(job=0.1, external_call=0.05, supervisor=0.3, lease=0.5))
    calls: list[float] = []

    @app.task(queue="q", max_attempts=1)
    def slow() -> None:
        calls.append(time.monotonic())
        time.sleep(0.2)

    store = MemoryJobStore()
    job_id = JobManager(store, app).enqueue(JobSpec("q", "slow"))
    worker = run(app, store, lambda: statuses(store) == ["failed"])
    assert worker.stats.timed_out == 1 and "timeout" in store.job(job_id)["last_error"]
