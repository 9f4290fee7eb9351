"""A worker's own threads failing outside any task: a claim thread is replaced, the
heartbeat goes on renewing leases, and a stuck process is abandoned even when its
``on_stuck`` hook raises. Each failure is real (raised inside the running thread); the
leases are shown renewed by a second worker that would rescue any job whose lease ran out.
"""

from __future__ import annotations

import ast
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import pigeon.jobs
from pigeon.exceptions import JobTimeout, StoreUnavailable
from pigeon.jobs.app import App
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import STUCK, Worker
from pigeon.storage.base import Database
from tests.waiting import wait_for

from .test_worker import statuses
from .threads import run_in_thread, stop_all

SHORT_LEASE = Timeouts(job=1.0, external_call=0.1, supervisor=1.1, lease=1.2)


def _spinning_app() -> App:
    app = App()
    app.queue("q", timeouts=SHORT_LEASE)

    @app.task(queue="q")
    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.01)

    return app


def _enqueue_past_the_lease(db: Database, app: App) -> None:
    # One thread, a batch of 3 jobs of 0.7 s: the last one starts ~1.4 s after the claim,
    # past the 1.2 s lease. Only renewals keep the thief from rescuing it.
    with db.transaction() as tx:  # one commit: the worker claims all three at once
        for _ in range(3):
            enqueue(tx, JobSpec("q", "spin", {"seconds": 0.7}), app=app)


def _fail_once(fn: Callable[..., object], after: int = 0) -> Callable[..., object]:
    """``fn``, raising RuntimeError on its call number ``after`` (counted from 0)."""
    calls = [0]

    def wrapped(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == after + 1:
            raise RuntimeError("a bug in the worker itself")
        return fn(*args, **kwargs)

    return wrapped


def _live(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def _run_with_thief(db: Database, app: App, worker: Worker) -> Worker:
    thief = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3), name="thief")
    t1 = run_in_thread(worker)
    time.sleep(0.1)
    _enqueue_past_the_lease(db, app)
    wait_for(lambda: worker.stats.claimed == 3)  # the worker holds the batch first
    t2 = run_in_thread(thief)
    wait_for(lambda: statuses(db) == {"succeeded": 3})
    worker.stop()
    thief.stop()
    t1.join(10)
    t2.join(10)
    return thief


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_claim_thread_dying_between_batches_is_replaced_and_leases_stay_renewed(
    db: Database,
) -> None:
    app = _spinning_app()
    worker = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3, poll=0.02, poll_max=0.05))
    # The claim loop's idle wait raises once: the thread dies outside any batch or task.
    worker.wakeup.wait = _fail_once(worker.wakeup.wait)  # type: ignore[method-assign]
    thief = _run_with_thief(db, app, worker)
    assert worker.stats.claimed == 3 and thief.stats.claimed == 0
    assert [j["attempts"] for j in list_jobs(db)] == [1, 1, 1]  # never rescued
    assert worker.threads("q") == 1


def test_the_heartbeat_survives_a_failure_and_keeps_renewing(db: Database) -> None:
    app = _spinning_app()
    worker = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3, poll=0.02, poll_max=0.05))
    # The heartbeat's 3rd round raises (before its renewals): before the fix the heartbeat
    # thread died there, no lease was renewed again and the thief ran the jobs a second time.
    worker._mark_started = _fail_once(worker._mark_started, after=2)  # type: ignore[method-assign]
    thief = _run_with_thief(db, app, worker)
    assert worker.stats.claimed == 3 and thief.stats.claimed == 0
    assert [j["attempts"] for j in list_jobs(db)] == [1, 1, 1]


def test_a_stuck_process_is_abandoned_even_if_on_stuck_raises(db: Database) -> None:
    app = _spinning_app()
    calls: list[int] = []

    def on_stuck() -> None:
        calls.append(1)
        sys.exit(STUCK)  # SystemExit in the heartbeat thread: it would end only that thread

    worker = Worker(app, db, {"q": 1}, on_stuck=on_stuck)
    JobManager(db, app).enqueue(JobSpec("q", "spin", {"seconds": 3.0}))  # past supervisor=1.1
    t = run_in_thread(worker)
    wait_for(lambda: worker.stopping, timeout=5)
    t.join(10)
    assert calls and worker.exit_code == STUCK


def test_a_job_whose_lease_lapsed_while_it_waited_in_the_batch_is_not_started(
    db: Database,
) -> None:
    # The heartbeat cannot renew (here its renewals fail; a paused process or a
    # database that answers claims but not this node's renewals is the same): the batch's
    # third job waits past its lease, and a claim rescues it (the thief's, or the worker's
    # own once its batch is over). The worker must not start it as well when its turn comes.
    app = App()
    app.queue("q", timeouts=SHORT_LEASE)
    runs: list[int] = []

    @app.task(queue="q")
    def spin(i: int, seconds: float) -> None:
        runs.append(i)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.01)

    worker = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3, poll=0.02, poll_max=0.05))

    def renew_fails(*args: object) -> object:
        raise StoreUnavailable("renewals do not get through")

    worker.manager.renew = renew_fails  # type: ignore[assignment]
    with db.transaction() as tx:
        for i, seconds in enumerate((0.7, 0.7, 0.1)):
            enqueue(tx, JobSpec("q", "spin", {"i": i, "seconds": seconds}), app=app)
    t1 = run_in_thread(worker)
    wait_for(lambda: worker.stats.claimed == 3)
    thief = Worker(app, db, {"q": 1}, WorkerOptions(batch=3, prefetch=3), name="thief")
    t2 = run_in_thread(thief)
    wait_for(lambda: statuses(db) == {"succeeded": 3})
    # Its batch is over. Past the third job's lease either worker may rescue that job (the
    # worker itself, polling again after its batch, can be first): counted at least three.
    wait_for(lambda: worker.stats.by_queue.get("q", 0) >= 3)
    worker.stop()
    thief.stop()
    t1.join(10)
    t2.join(10)
    assert runs.count(2) == 1, runs  # the third job ran once: by its rescuer


def test_a_graceful_stop_that_runs_out_of_grace_says_which_jobs_it_left(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    # The process exits with the job still running; it is recovered after its lease
    # expires. That must not happen in silence: the operator learns which jobs, and why.
    app = App()
    app.queue("q", timeouts=Timeouts(job=5.0))
    started = threading.Event()

    @app.task(queue="q")
    def slow() -> None:
        started.set()
        time.sleep(1.5)

    job_id = JobManager(db, app).enqueue(JobSpec("q", "slow"))
    worker = Worker(app, db, {"q": 1})
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(worker.run(grace=0.2)), daemon=True)
    with caplog.at_level(logging.WARNING, logger="pigeon.jobs.worker"):
        thread.start()
        assert started.wait(10)
        worker.stop()
        thread.join(10)
    assert code == [0]
    left = [r.getMessage() for r in caplog.records if "grace" in r.getMessage()]
    assert len(left) == 1 and f"[{job_id}]" in left[0], caplog.text
    assert worker.join(5)  # the job ends on its own; nothing outlives the database


def test_a_timeout_recorded_after_the_job_was_rescued_counts_as_lost(db: Database) -> None:
    # The watchdog times the job out; the heartbeat's write of that outcome gets through
    # only after the lease lapsed (renewals fail here) and the job was claimed again (by
    # this worker: nobody else runs). The write is fenced: the worker must count the
    # outcome lost, as its claim threads do.
    app = App()
    # The heartbeat gives a write up a lease after it began (unrecorded): the job timeout
    # (1 s) is the window in which the rescue lands first and the write is fenced instead.
    app.queue("q", timeouts=Timeouts(job=1.0, external_call=0.1, supervisor=3.0, lease=3.2))
    timed_out = threading.Event()
    runs: list[int] = []

    @app.task(queue="q")
    def hang() -> None:
        runs.append(1)
        if len(runs) == 1:
            timed_out.wait(2.5)  # ends after the timeout, before the supervisor's deadline

    worker = Worker(app, db, {"q": 1}, WorkerOptions(poll=0.02, poll_max=0.05))
    finish = worker.manager.finish

    def renew_fails(*args: object) -> object:
        raise StoreUnavailable("renewals do not get through")

    def finish_after_the_rescue(outcomes: list[AttemptOutcome]) -> list[bool]:
        if any(isinstance(o.error, JobTimeout) for o in outcomes):
            wait_for(lambda: worker.stats.claimed == 2, timeout=20, what="the rescue")
        return finish(outcomes)

    worker.manager.renew = renew_fails  # type: ignore[assignment]
    worker.manager.finish = finish_after_the_rescue  # type: ignore[method-assign]
    JobManager(db, app).enqueue(JobSpec("q", "hang"))
    thread = run_in_thread(worker)
    wait_for(lambda: worker.stats.timed_out == 1, timeout=5)
    timed_out.set()
    wait_for(lambda: statuses(db) == {"succeeded": 1}, timeout=20)
    wait_for(lambda: worker.stats.lost + worker.stats.failed + worker.stats.unrecorded, timeout=20)
    worker.stop()
    thread.join(10)
    assert (worker.stats.lost, worker.stats.failed, worker.stats.unrecorded) == (1, 0, 0)
    assert len(runs) == 2 and worker.stats.succeeded == 1


# The manager's writes about held jobs answer, per job, whether the lease was still held;
# ``_persist`` passes that answer on.
_FENCED_WRITES = {"finish", "renew", "release", "start_jobs"}


def _is_fenced_write(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    on_manager = (isinstance(owner, ast.Name) and owner.id == "manager") or (
        isinstance(owner, ast.Attribute) and owner.attr == "manager"
    )
    return func.attr == "_persist" or (on_manager and func.attr in _FENCED_WRITES)


def _dropped_answers(source: str) -> list[int]:
    """Lines where a fenced write is a statement of its own: its answer thrown away."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and _is_fenced_write(node.value)
    ]


def test_no_worker_thread_drops_the_answer_of_a_fenced_write() -> None:
    jobs = Path(pigeon.jobs.__file__).parent
    found = {p.name: _dropped_answers(p.read_text()) for p in sorted(jobs.glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
    dropped = "self._persist(jobs, lambda: self.manager.finish(expired))\nmanager.renew(j, 1)\n"
    assert _dropped_answers(dropped) == [1, 2]  # the shape the heartbeat had, and the plain one


def test_a_worker_a_test_left_running_is_stopped_before_its_database_closes(
    db: Database,
) -> None:
    # What tests/jobs/conftest.py does after every test, before the fixtures' teardown.
    app = App()
    app.queue("q")
    worker = Worker(app, db, {"q": 1}, WorkerOptions(poll=0.02, poll_max=0.05))
    thread = run_in_thread(worker)
    wait_for(lambda: worker.stats.claimed == 0 and thread.is_alive())
    time.sleep(0.2)  # polling its empty queue
    assert stop_all() == [worker]
    assert not thread.is_alive() and worker.stopping
    assert stop_all() == []  # each once
