"""The Worker's threads on a real SQLite file: heartbeat, timeouts, starvation, stop, recycling."""

from __future__ import annotations

import threading
import time

import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import App
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import Job, JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import RECYCLE, STOPPED, STUCK, Worker
from pigeon.storage.base import Database
from tests.jobs.threads import run_in_thread
from tests.waiting import wait_for


def statuses(db: Database, queue: str | None = None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in list_jobs(db, queue=queue, limit=10_000):
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    return counts


def test_heartbeat_renews_leases_while_jobs_run(db: Database) -> None:
    app = App()
    app.queue("q", timeouts=Timeouts(job=1.0, external_call=0.1, supervisor=1.1, lease=1.2))

    @app.task(queue="q")
    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # pure Python, holding the GIL as much as it can
            pass

    m = JobManager(db, app)
    for _ in range(3):
        m.enqueue(JobSpec("q", "spin", {"seconds": 0.7}))
    # one thread, batch of 3: the last job starts ~1.4 s after the claim, past the lease
    worker = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3))
    thief = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3), name="thief")
    t1 = run_in_thread(worker)
    time.sleep(0.1)
    t2 = run_in_thread(thief)
    wait_for(lambda: statuses(db) == {"succeeded": 3})
    worker.stop()
    thief.stop()
    t1.join()
    t2.join()
    assert [j["attempts"] for j in list_jobs(db)] == [1, 1, 1]
    assert thief.stats.claimed == 0


def test_job_over_its_timeout_is_recorded_and_retried(db: Database) -> None:
    app = App()
    app.queue("q", timeouts=Timeouts(job=0.3, external_call=0.1, supervisor=1.0, lease=1.5))
    runs: list[int] = []

    @app.task(queue="q")
    def slow() -> None:
        runs.append(1)
        if len(runs) == 1:
            time.sleep(0.6)

    job_id = JobManager(db, app).enqueue(JobSpec("q", "slow"))
    worker = Worker(app, db, {"q": 1})
    t = run_in_thread(worker)
    wait_for(lambda: statuses(db) == {"succeeded": 1})
    worker.stop()
    t.join()
    history = show_job(db, job_id)["history"]
    assert [a["outcome"] for a in history] == ["error", "succeeded"]
    assert "JobTimeout" in history[0]["error"] and "over its 0.3s timeout" in history[0]["error"]
    # the retry waited for the supervisor deadline of the overrunning attempt
    assert history[1]["started_at"] >= history[0]["started_at"] + 1.0
    assert worker.stats.timed_out == 1


def test_flooded_queue_does_not_starve_another(db: Database) -> None:
    app = App()
    app.queue("bulk", freshness=600)
    app.queue("urgent", freshness=1)
    done: dict[str, float] = {}

    @app.task(queue="bulk")
    def churn() -> None:
        time.sleep(0.01)

    @app.task(queue="urgent")
    def page(n: int) -> None:
        done[f"page{n}"] = time.monotonic()

    m = JobManager(db, app)
    with db.transaction() as tx:
        from pigeon.jobs.manager import enqueue

        for _ in range(1000):
            enqueue(tx, JobSpec("bulk", "churn"))
    worker = Worker(app, db, {"bulk": 2, "urgent": 1})
    t = run_in_thread(worker)
    wait_for(lambda: worker.stats.started >= 2, 10, "both bulk threads to be busy")
    submitted = time.monotonic()
    for n in range(5):
        m.enqueue(JobSpec("urgent", "page", {"n": n}))
    wait_for(lambda: len(done) == 5, timeout=5)
    worst = max(done.values()) - submitted
    backlog = statuses(db, "bulk").get("queued", 0)
    worker.stop()
    t.join()
    assert worst < 1.0  # within the urgent queue's freshness objective
    assert backlog > 100  # ... while the flooded queue was still far from drained


def test_graceful_stop_finishes_the_running_job_and_releases_the_rest(db: Database) -> None:
    app = App()
    app.queue("q", timeouts=Timeouts(job=2))
    started = threading.Event()

    @app.task(queue="q")
    def work() -> None:
        started.set()
        time.sleep(0.3)

    m = JobManager(db, app)
    ids = [m.enqueue(JobSpec("q", "work")) for _ in range(4)]
    worker = Worker(app, db, {"q": 1}, WorkerOptions(batch=4, prefetch=4))
    t = run_in_thread(worker)
    assert started.wait(5)
    worker.stop()
    t.join()
    assert worker.exit_code == STOPPED
    jobs = {j["id"]: j for j in list_jobs(db)}
    assert jobs[ids[0]]["status"] == "succeeded"
    for job_id in ids[1:]:
        assert (jobs[job_id]["status"], jobs[job_id]["attempts"]) == ("queued", 0)
        assert [a["outcome"] for a in show_job(db, job_id)["history"]] == ["released"]


def test_recycles_after_n_jobs(db: Database) -> None:
    app = App()
    app.queue("q", batch=5)

    @app.task(queue="q")
    def noop() -> None:
        pass

    m = JobManager(db, app)
    for _ in range(30):
        m.enqueue(JobSpec("q", "noop"))
    worker = Worker(app, db, {"q": 1}, WorkerOptions(recycle_jobs=10))
    assert worker.run(grace=5) == RECYCLE
    assert worker.stats.started == 10
    assert statuses(db) == {"succeeded": 10, "queued": 20}


def test_recycles_over_memory_budget(db: Database) -> None:
    app = App()

    @app.task(queue="q")
    def noop() -> None:
        pass

    JobManager(db, app).enqueue(JobSpec("q", "noop"))
    # Any Python process is over 1 MiB.
    worker = Worker(app, db, {"q": 1}, WorkerOptions(recycle_mib=1))
    assert worker.run(grace=5) == RECYCLE
    assert statuses(db) == {"succeeded": 1}


def test_a_finished_job_waiting_in_the_batch_buffer_never_times_out(db: Database) -> None:
    # Job A returns at once; its outcome waits in the batch buffer while B runs. A timeout
    # check at a moment past A's timeout (but not B's) must leave A alone. The check is
    # called from B with an explicit clock, so the test does not race the heartbeat.
    app = App()
    app.queue("q", timeouts=Timeouts(job=5.0), batch=2)
    runs: dict[str, int] = {}
    a_started: list[float] = []
    worker: Worker

    @app.task(queue="q")
    def work(n: str) -> None:
        runs[n] = runs.get(n, 0) + 1
        if n == "A":
            a_started.append(time.monotonic())
            time.sleep(0.1)  # B starts >= 0.1 s after A (under the 0.2 s flush interval)
        else:
            # A is 0.05 s past its timeout, B still >= 0.05 s short of it
            worker._check_timeouts(now=a_started[0] + 5.0 + 0.05)

    m = JobManager(db, app)
    a = m.enqueue(JobSpec("q", "work", {"n": "A"}))
    m.enqueue(JobSpec("q", "work", {"n": "B"}))
    worker = Worker(app, db, {"q": 1}, WorkerOptions(prefetch=2))  # A and B in one claim
    t = run_in_thread(worker)
    wait_for(lambda: "B" in runs and not worker._held)
    worker.stop()
    t.join()
    assert worker.stats.timed_out == 0
    assert runs == {"A": 1, "B": 1}
    assert [h["outcome"] for h in show_job(db, a)["history"]] == ["succeeded"]
    assert statuses(db) == {"succeeded": 2}


def test_a_timed_out_job_is_not_claimable_before_its_process_is_abandoned(db: Database) -> None:
    # The retry of a timed-out job must wait until the process still running it has been
    # abandoned (on_stuck); here it is eligible >= 1 s after that, at its lease's end.
    app = App()
    app.queue(
        "q",
        timeouts=Timeouts(job=0.3, external_call=0.1, supervisor=0.5, lease=1.5),
        backoff=Backoff(base=0.001, cap=0.001),  # the retry time is the worker's alone
    )
    release = threading.Event()
    stuck_at: list[float] = []

    @app.task(queue="q")
    def hang() -> None:
        release.wait(10)

    def on_stuck() -> None:
        stuck_at.append(time.time())
        release.set()

    job_id = JobManager(db, app).enqueue(JobSpec("q", "hang"))
    worker = Worker(app, db, {"q": 1}, on_stuck=on_stuck)
    assert worker.run(grace=5) == STUCK
    job = show_job(db, job_id)
    assert job["status"] == "queued" and "JobTimeout" in job["last_error"]
    assert job["scheduled_at"] > stuck_at[0]
    assert job["scheduled_at"] >= job["history"][0]["started_at"] + 1.5


def test_a_task_raising_system_exit_fails_only_its_own_job(db: Database) -> None:
    app = App()
    app.queue("q", timeouts=Timeouts(job=5.0), batch=3)
    ran: list[int] = []

    @app.task(queue="q", max_attempts=1)
    def t(i: int) -> None:
        ran.append(i)
        if i == 0:
            raise SystemExit(2)

    m = JobManager(db, app)
    ids = [m.enqueue(JobSpec("q", "t", {"i": i})) for i in range(3)]
    worker = Worker(app, db, {"q": 1})
    t_ = run_in_thread(worker)
    wait_for(lambda: statuses(db) == {"failed": 1, "succeeded": 2})
    assert worker.threads("q") == 1 and not worker.stopping
    worker.stop()
    t_.join()
    assert ran == [0, 1, 2]
    assert "SystemExit" in show_job(db, ids[0])["last_error"]


def test_a_run_ending_abnormally_releases_its_job_and_the_thread_goes_on(db: Database) -> None:
    app = App()
    app.queue("q", timeouts=Timeouts(job=5.0), batch=3)

    @app.task(queue="q")
    def noop(i: int) -> None:
        pass

    m = JobManager(db, app)
    ids = [m.enqueue(JobSpec("q", "noop", {"i": i})) for i in range(3)]
    worker = Worker(app, db, {"q": 1}, WorkerOptions(prefetch=3))
    execute = worker._execute
    broken: list[int] = []

    def execute_once_broken(job: Job) -> AttemptOutcome | None:
        if job.id == ids[1] and not broken:
            broken.append(job.id)
            raise RuntimeError("a bug in the worker")
        return execute(job)

    worker._execute = execute_once_broken  # type: ignore[method-assign]
    t = run_in_thread(worker)
    wait_for(lambda: statuses(db) == {"succeeded": 3})
    assert worker.threads("q") == 1
    worker.stop()
    t.join()
    assert worker.stats.released == 1  # the job the bug hit; the third ran in its turn
    # released with the attempt refunded, not left to the (7.5 s) lease
    assert [j["attempts"] for j in list_jobs(db)] == [1, 1, 1]


def test_a_worker_budget_above_the_queue_maximum_is_refused(db: Database) -> None:
    app = App()
    app.queue("q", min_workers=1, max_workers=2)
    with pytest.raises(ConfigurationError, match="outside its budget"):
        Worker(app, db, {"q": 10})
    with pytest.raises(ConfigurationError, match="outside its budget"):
        Worker(app, db, {"q": Budget(1, 3)})
    assert Worker(app, db, {"q": 2}).queues["q"] == Budget(1, 2)


def test_a_timed_out_outcome_handed_to_the_heartbeat_is_recorded_when_the_worker_stops(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The watchdog hands a timed-out attempt's outcome to the heartbeat, which is stuck in
    # a renewal (its database away); the worker stops, the job's thread ends and the
    # renewal returns. The heartbeat's last round must still record that outcome (or count
    # it), not end with it in hand: the attempt's JobTimeout belongs in its history.
    app = App()
    app.queue(
        "q",
        timeouts=Timeouts(job=0.2, external_call=0.1, supervisor=5.0, lease=30.0),
        backoff=Backoff(base=0.001, cap=0.001),
    )
    release, renewing, gate = threading.Event(), threading.Event(), threading.Event()

    @app.task(queue="q")
    def slow() -> None:
        release.wait(5)

    job_id = JobManager(db, app).enqueue(JobSpec("q", "slow", max_attempts=3))
    worker = Worker(app, db, {"q": 1})
    renew = worker.manager.renew

    def stuck(jobs: list[Job], lease: float) -> list[Job]:
        renewing.set()
        gate.wait(5)
        return renew(jobs, lease)

    monkeypatch.setattr(worker.manager, "renew", stuck)
    t = run_in_thread(worker)
    wait_for(lambda: renewing.is_set() and worker.stats.timed_out == 1)
    worker.stop()
    release.set()
    wait_for(lambda: not worker._held)  # the job's thread has ended, its outcome unwritten
    gate.set()
    t.join()
    stats = worker.stats
    assert stats.failed + stats.unrecorded + stats.lost == 1, stats
    (first,) = show_job(db, job_id)["history"]
    assert first["outcome"] == "error" and "JobTimeout" in first["error"]
