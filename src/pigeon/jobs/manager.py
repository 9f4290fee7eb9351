"""The JobManager: every state change of a job, each one a single transaction of the jobs
store (``jobs/store.py``); the manager holds the policy, the store the statements.

Leasing is "up to n jobs of queue q for worker w with lease L" in one statement (on
PostgreSQL with ``FOR UPDATE SKIP LOCKED``, the attempts started in the same statement).
Finishing is a compare-and-set on (job, attempt, lease token): a worker whose lease expired
and whose job was rescued by another worker cannot overwrite the rescuer's outcome. On
PostgreSQL, where every statement is a round trip, a batch's successes and lease renewals
are one set-based statement each.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.job import FailedJob as FailedJob  # its home before job.py
from pigeon.jobs.job import Job, JobId, JobSpec
from pigeon.jobs.rows import ATTEMPT, NewJob
from pigeon.jobs.store import ANY_TASK, EnqueueSession, JobStore, LeaseSession
from pigeon.jobs.stores import session_for, store_for
from pigeon.logs import failure, redact_text
from pigeon.storage.base import Database, Tx

Clock = Callable[[], float]
log = logging.getLogger("pigeon.jobs.manager")


def enqueue(
    tx: Tx,
    spec: JobSpec | None = None,
    *,
    queue: str | None = None,
    task: str | None = None,
    payload: dict[str, Any] | None = None,
    record_id: str | None = None,
    obligation: str | None = None,
    now: float | None = None,
    app: App | None = None,
    **options: Any,
) -> JobId:
    """Write a job in the caller's transaction; it exists only if that transaction commits.

    With ``app``, the job must be one the app can run (``App.check_spec``: a registered
    task, on its own queue, with a payload that binds to its function; InvalidOperation
    otherwise, nothing written), and a retry policy the spec does not give is the task's
    (``@app.task(max_attempts=..., max_age=...)``). Without one, the defaults.
    A ``unique_key`` already used returns the existing job's id instead of a second job,
    for as long as that job is kept: until retention purges it, when the key is free again
    (see ``JobSpec.unique_key``)."""
    if spec is None:
        spec = JobSpec(queue or "", task or "", payload or {}, **options)
    now = time.time() if now is None else now
    return write_job(
        session_for(tx), spec, record_id=record_id, obligation=obligation, now=now, app=app
    )


def write_job(
    session: EnqueueSession,
    spec: JobSpec,
    *,
    now: float,
    app: App | None,
    record_id: str | None = None,
    obligation: str | None = None,
) -> JobId:
    """``enqueue`` in a session the caller holds (a manager's, a schedule's, a record's)."""
    if app is not None:
        app.check_spec(spec.queue, spec.task, spec.payload, spec.version)
    registered = app.tasks.get(spec.task) if app is not None else None
    if registered is not None:
        max_attempts, max_age = spec.policy(registered.max_attempts, registered.max_age)
        version = spec.version or registered.version
    else:
        max_attempts, max_age = spec.policy()
        version = spec.version or 1
    job = NewJob(
        queue=spec.queue,
        task=spec.task,
        payload=spec.payload_json(),
        max_attempts=max_attempts,
        max_age=max_age,
        now=now,
        scheduled_at=now + spec.delay,
        owner=spec.owner,
        record_id=record_id,
        obligation=obligation,
        unique_key=spec.unique_key,
        version=version,
    )
    return session.insert_job(job)


@dataclass(frozen=True)
class AttemptOutcome:
    """How one attempt of a job ended, as the worker reports it to ``JobManager.finish``.
    ``error is None`` means success."""

    job: Job
    error: BaseException | None = None
    not_before: float = 0.0  # earliest retry time (a timed-out job waits for its supervisor)


def describe(error: BaseException) -> str:
    """``error`` as a job's or an outbox row's recorded error: its type and message, cut
    to 2,000 characters, with what the logs hide hidden (`pigeon.logs.redact_text`): the
    text is shown on the page, in the CLI, in the dashboard's JSON and the alert hook."""
    text = "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]
    return redact_text(text) or ""


class JobManager:
    """The policy of a job's life: budgets, backoff, permanent errors, the failed store's
    alert. Every state change is one transaction of the jobs store, whichever it is."""

    def __init__(
        self,
        db: Database | JobStore[LeaseSession],
        app: App | None = None,
        *,
        clock: Clock = time.time,
        rng: random.Random | None = None,
        runs_tasks: bool = False,
    ) -> None:
        """``runs_tasks``: the caller runs what it claims through ``app`` (a ``Worker``):
        its claims take only the tasks the app declares, none if it declares none."""
        self.db = db
        self.store: JobStore[LeaseSession] = store_for(db)
        # Without an app there is nothing to check a job against: enqueue then writes what
        # it is given (a producer that does not import the tasks), with default policies.
        self._checks = app
        self.app = app or App()
        self.clock = clock
        self.rng = rng or random.Random()
        self.runs_tasks = runs_tasks

    def enqueue(self, spec: JobSpec) -> JobId:
        with self.store.transaction() as session:
            return write_job(session, spec, now=self.clock(), app=self._checks)

    def lease_jobs(
        self, queue: str, worker: str, n: int, lease: float, *, start: int | None = None
    ) -> list[Job]:
        """Lease up to ``n`` eligible jobs of ``queue``: ready ones and ones whose lease
        expired, of a task and payload version the app knows (``known_versions``). A rescued job
        that has no budget left goes to the failed store instead.

        ``start``: how many of them (the first, in due order) begin running now; the
        others are claimed but not started, and count as waiting until ``start_job``.
        None: all of them (a caller that runs what it leases at once)."""
        now = self.clock()
        token = uuid.uuid4().hex
        alerts: list[FailedJob | None] = []
        with self.store.transaction() as session:
            claimed = session.claim_due(
                queue=queue, worker=worker, token=token, now=now, until=now + lease, n=n,
                start=n if start is None else start, versions=self.known_versions(),
            )  # fmt: skip
            if not claimed:
                return []
            runnable = []
            doomed: list[tuple[Job, str]] = []
            for job in claimed:
                if job.attempt > 1:
                    session.mark_attempt_lost(job.id, job.attempt, now)
                reason = self._out_of_budget(job, now, starting=True)
                if reason is None:
                    runnable.append(job)
                elif job.last_error:
                    # What made it retry until its budget ran out: kept beside the reason
                    # (the failed store groups by it), never replaced by the age message.
                    doomed.append((job, f"{reason}; last error: {job.last_error}"))
                else:
                    doomed.append((job, reason))
            session.lock_in_order([job for job, _ in doomed], jobs_held=True)
            for job, reason in doomed:
                alerts.append(self._fail(session, job, reason, now))
        self._alert(alerts)
        return runnable

    def known_versions(self) -> dict[str, int]:
        """The newest payload version this manager's app runs, per task it declares: a
        claim leaves a job of a newer version, or of a task the app lacks (a task added by
        a deploy still under way, or removed by one), for a worker that knows it, never
        running it wrongly nor failing it. Without an app, or with one that declares no
        task, unless it ``runs_tasks`` (a manager driven by hand, by a tool or a test):
        every task, at version 1."""
        if not self.app.tasks and not self.runs_tasks:
            return {ANY_TASK: 1}
        return {name: t.version for name, t in self.app.tasks.items()}

    def start_job(self, job: Job) -> bool:
        """Mark ``job``'s attempt started (it runs from now; until then it counted as
        waiting). False if its lease no longer holds it: it must not start."""
        return job.id in self.start_jobs([job])

    def start_jobs(self, jobs: Sequence[Job]) -> set[JobId]:
        """``start_job`` for many in one transaction; the ids whose lease still holds."""
        now = self.clock()
        with self.store.transaction() as session:
            return {job.id for job in jobs if session.mark_started(job, now)}

    def pressure(self, queue: str, cap: int) -> tuple[int, float | None]:
        """The waiting backlog of ``queue`` (counted up to ``cap``: ready, claimed but not
        started, lease expired) and when its oldest waiting job became due (None: none)."""
        with self.store.reading() as session:
            row = session.queue_pressure(queue, self.clock(), cap)
        if row is None:
            return 0, None
        oldest = row["oldest_ready_at"]
        return int(row["backlog"] or 0), None if oldest is None else float(oldest)

    def renew(self, jobs: Sequence[Job], lease: float) -> list[Job]:
        """Extend the leases; returns the jobs whose lease was lost (rescued or finished)."""
        if not jobs:
            return []
        until = self.clock() + lease
        with self.store.transaction() as session:
            held = session.renew_leases(jobs, until)
        return [job for job in jobs if job.id not in held]

    def finish(self, outcomes: Sequence[AttemptOutcome]) -> list[bool]:
        """Record many attempts in one transaction. False where the lease was lost."""
        if not outcomes:
            return []
        now = self.clock()
        results: dict[int, bool] = {}
        alerts = []
        with self.store.transaction() as session:
            session.lock_in_order([o.job for o in outcomes])
            wins = [(i, o.job) for i, o in enumerate(outcomes) if o.error is None]
            done = session.mark_succeeded([job for _, job in wins], now) if wins else set()
            for index, job in wins:
                results[index] = job.id in done
                if job.id in done and job.record_id:
                    self._record_success(session, job, now)
            for index, outcome in enumerate(outcomes):
                if outcome.error is None:
                    continue
                ok, alert = self._finish_failed(session, outcome, outcome.error, now)
                results[index] = ok
                if alert is not None:
                    alerts.append(alert)
        self._alert(alerts)
        return [results[i] for i in range(len(outcomes))]

    def _record_success(self, session: LeaseSession, job: Job, now: float) -> None:
        """The ledger side of a success: the attempt event, then the obligation."""
        self._attempt_event(session, job, "succeeded", None, now)
        if job.record_id and job.obligation:
            session.settle_obligation(
                job.record_id, job.obligation, "completed", {"job_id": job.id}, now
            )

    def release(self, jobs: Sequence[Job]) -> int:
        """Give jobs back untouched (graceful stop): ready at once, the attempt refunded."""
        now = self.clock()
        released = 0
        with self.store.transaction() as session:
            # Ascending ids: the order of every batched write of job rows (lock_in_order).
            for job in sorted(jobs, key=lambda j: j.id):
                if session.requeue(job, scheduled_at=now, error=None, refund=1):
                    released += 1
                    session.notify_ready(job.queue)  # ready again at once: wake idle workers
                    session.finish_attempt(job, outcome="released", error=None, now=now)
        return released

    def _finish_failed(
        self, session: LeaseSession, outcome: AttemptOutcome, error: BaseException, now: float
    ) -> tuple[bool, FailedJob | None]:
        job = outcome.job
        message = describe(error)
        reason = None
        mismatch = self._payload_mismatch(job, error)
        if mismatch is not None:
            reason = f"permanent error: {mismatch}"
        elif self.app.is_permanent(job.task, error):
            reason = f"permanent error: {message}"
        else:
            reason = self._out_of_budget(job, now, starting=False)
            if reason is not None:
                reason = f"{reason}; last error: {message}"
        if reason is not None:
            alert = self._fail(
                session, job, reason, now, attempt_error=message, not_before=outcome.not_before
            )
            return alert is not None, alert
        backoff = self.app.queue_config(job.queue).backoff
        # Counted within the job's current budget: a reviewed retry starts the attempts and
        # their backoff afresh (the 1st failure after it waits like a 1st failure, not like
        # the 6th), as the budget check above counts them.
        failures = max(1, job.attempt - job.attempt_base)
        retry_at = max(now + backoff.delay(failures, self.rng), outcome.not_before)
        if not session.requeue(job, scheduled_at=retry_at, error=message, refund=0):
            return False, None
        self._attempt_done(session, job, "error", message, now)
        return True, None

    def _payload_mismatch(self, job: Job, error: BaseException) -> str | None:
        """A payload that cannot bind to the task's parameters (stored before the check at
        enqueue, or by a producer without the app) fails the same way on every attempt:
        a TypeError from the call is then permanent, not retried with backoff."""
        task = self.app.tasks.get(job.task)
        if task is None or not isinstance(error, TypeError):
            return None
        return task.binding_error(job.payload)

    def _out_of_budget(self, job: Job, now: float, *, starting: bool) -> str | None:
        # On a claim, attempt n is about to run; after a failure, attempt n has been used.
        used = (job.attempt - 1 if starting else job.attempt) - job.attempt_base
        if used >= job.max_attempts:
            why = "lease expired on its last attempt" if starting else "attempts exhausted"
            return f"{why} ({used} of {job.max_attempts})"
        if job.max_age is not None and now - job.budget_start > job.max_age:
            return f"older than its max age ({now - job.budget_start:.1f}s > {job.max_age:g}s)"
        return None

    def _attempt_done(
        self, session: LeaseSession, job: Job, outcome: str, error: str | None, now: float
    ) -> None:
        session.finish_attempt(job, outcome=outcome, error=error, now=now)
        self._attempt_event(session, job, outcome, error, now)

    def _attempt_event(
        self, session: LeaseSession, job: Job, outcome: str, error: str | None, now: float
    ) -> None:
        if job.record_id:
            detail: dict[str, Any] = {
                "job_id": job.id,
                "attempt": job.attempt,
                "outcome": outcome,
                "seconds": round(now - job.started_at, 6),
            }
            if error:
                detail["error"] = error
            session.ledger_event(job.record_id, job.obligation, ATTEMPT, detail, now)

    def _fail(
        self,
        session: LeaseSession,
        job: Job,
        reason: str,
        now: float,
        *,
        attempt_error: str | None = None,
        not_before: float = 0.0,
    ) -> FailedJob | None:
        """Move the job to the failed store if this worker still holds it (job, attempt,
        lease token); only then is the attempt recorded as failed, so a late finisher never
        rewrites the history of a job someone else rescued. ``not_before``: no reviewed
        retry runs it earlier (a timed-out attempt's process may still be running)."""
        owner = job.owner or self.app.owner_for(job.queue, job.task)
        if not session.mark_failed(job, now=now, error=reason, owner=owner, not_before=not_before):
            return None
        self._attempt_done(session, job, "failed", attempt_error or reason, now)
        if job.record_id and job.obligation:
            session.settle_obligation(
                job.record_id,
                job.obligation,
                "failed",
                {"job_id": job.id, "owner": owner, "error": reason},
                now,
            )
        return FailedJob(job.id, job.queue, job.task, owner, reason, job.attempt, job.record_id)

    def _alert(self, failed: Sequence[FailedJob | None]) -> None:
        """Call the alert hook once per failed job, after the transaction committed.

        A hook that raises is logged and never propagates: the claim or finish it follows
        is already durable, and raising would make the caller drop jobs it now holds (held
        by nobody until their lease expires, an attempt lost). One failing call does not
        keep the other failed jobs from being alerted."""
        hook = self.app.alert
        if hook is None:
            return
        for item in failed:
            if item is None:
                continue
            try:
                hook(item)
            except Exception as exc:
                failure(
                    log, "alert hook failed for job %s (%s/%s)", item.id, item.queue, item.task,
                    exc=exc,
                )  # fmt: skip
