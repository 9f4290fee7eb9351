"""The jobs component's store protocol: everything the job manager, the worker, the
failed store, retention, schedules and wakeups ask of the database.

``JobStore`` opens work on the database (``transaction``, ``reading``) or joins a
transaction it was handed (``session(tx)``: the intake's open transaction, in which
``records.accept`` writes its jobs; later an application's own connection). Either way the
work is done through a ``JobSession``, whose methods are the job component's statements.
The implementations live in ``pigeon.jobs.stores``: SQLite, PostgreSQL (lock ordering,
array binds, LISTEN wakeups) and in-memory (the unit tier). The policy code never asks
which backend it runs on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from pigeon.jobs.job import Job, JobId

if TYPE_CHECKING:
    from pigeon.jobs.wakeup import Wakeup

Row = dict[str, Any]


class JobSession(Protocol):
    """The jobs store inside one open transaction (its own, or one it was handed)."""

    @property
    def tx(self) -> Any:
        """What application callbacks (an access re-check, an effect) receive as their
        transaction: the storage ``Tx`` on SQL stores."""
        ...

    # -- writing and claiming --------------------------------------------------------
    def insert_job(self, params: Mapping[str, Any]) -> JobId:
        """Insert a job; a ``unique_key`` already used returns the existing job's id."""
        ...

    def claim_due(
        self, *, queue: str, worker: str, token: str, now: float, until: float, n: int,
        start: int,
    ) -> list[Row]:  # fmt: skip
        """Lease up to ``n`` eligible jobs (ready, or with an expired lease), their attempts
        opened; the rows in due order (scheduled_at, id), each with its ``last_error``. The
        first ``start`` are marked started now (the caller runs them at once); the others
        are claimed, not started, and still count as waiting until ``mark_started``."""
        ...

    def mark_started(self, job: Job, now: float) -> bool:
        """The started marker: ``job``'s attempt begins running now. False if the lease no
        longer holds the job (rescued): it must not start."""
        ...

    def mark_attempt_lost(self, job_id: JobId, attempt: int, now: float) -> None: ...

    def lock_in_order(self, jobs: Sequence[Job], *, jobs_held: bool = False) -> None:
        """Take the row locks a transaction about ``jobs`` will need, in the one order
        every such transaction follows (where the backend has row locks)."""
        ...

    def renew_leases(self, jobs: Sequence[Job], until: float) -> set[JobId]:
        """Extend the leases still held; returns their ids."""
        ...

    def mark_succeeded(self, jobs: Sequence[Job], now: float) -> set[JobId]:
        """Record the successes (job and attempt) of the jobs still held; their ids."""
        ...

    def requeue(self, job: Job, *, scheduled_at: float, error: str | None, refund: int) -> bool: ...

    def mark_failed(
        self, job: Job, *, now: float, error: str, owner: str, not_before: float
    ) -> bool: ...

    def finish_attempt(self, job: Job, *, outcome: str, error: str | None, now: float) -> None: ...

    def notify_ready(self, queue: str) -> None:
        """A job of ``queue`` became ready other than by insert: wake idle workers."""
        ...

    def queue_pressure(self, queue: str, now: float, cap: int) -> Row | None: ...

    # -- records and the ledger ------------------------------------------------------
    def insert_record(
        self, *, record_id: str, kind: str, data: str, principal: str | None, now: float
    ) -> None:
        """A record, ``received``; ``data`` its JSON text (the store seals it)."""
        ...

    def insert_obligation(self, record_id: str, name: str, job_id: JobId, now: float) -> None:
        """A pending obligation of the record, settled by its job."""
        ...

    def complete_record(self, record_id: str, now: float) -> bool:
        """Mark the record completed; False if it already was."""
        ...

    def job_by_unique_key(self, unique_key: str) -> JobId | None: ...

    def ledger_event(
        self, record_id: str, obligation: str | None, kind: str, detail: Any, now: float
    ) -> None:
        """A recorded state of the record; ``detail`` JSON-able, or None."""
        ...

    def settle_obligation(
        self, record_id: str, obligation: str, status: str, detail: Any, now: float
    ) -> None:
        """Move one obligation to ``status``, with its ledger event; the record completes
        (and says so in the ledger) when no obligation is left open."""
        ...

    def get_record(self, record_id: str) -> Row | None:
        """id, kind, data (JSON text, in clear), status, created_at, completed_at,
        principal."""
        ...

    def obligations_of(self, record_id: str) -> list[Row]:
        """name, job_id, status, updated_at of each obligation, by name."""
        ...

    def events_of(self, record_id: str) -> list[Row]:
        """obligation, state, detail (JSON text in clear, or None), at; oldest first."""
        ...

    # -- the failed store ------------------------------------------------------------
    def get_job(self, job_id: JobId) -> Row | None: ...

    def list_jobs(self, *, status: str | None, queue: str | None, limit: int) -> list[Row]: ...

    def attempts_of(self, job_id: JobId) -> list[Row]: ...

    def reviews_of(self, job_id: JobId) -> list[Row]: ...

    def review(self, job_id: JobId, action: str, now: float) -> bool:
        """``action`` "retry" or "cancel"; False if the job's status does not allow it."""
        ...

    def record_review(
        self, job_id: JobId, *, action: str, reviewer: str, reason: str, now: float
    ) -> None: ...

    # -- retention and schedules ---------------------------------------------------------
    def purge_finished(self, *, before: float, limit: int) -> int: ...

    def purge_ticks(self, *, schedule: str, before_tick: int, limit: int) -> int: ...

    def take_tick(self, schedule: str, tick: int, now: float) -> bool: ...

    def set_tick_job(self, schedule: str, tick: int, job_id: JobId) -> None: ...

    # -- freshness -------------------------------------------------------------------
    def open_breach(self, *, queue: str, now: float, age: float, objective: float) -> bool: ...

    def close_breach(self, queue: str) -> None: ...

    def breaches(self) -> list[Row]:
        """The open breach episodes (queue, since, age, objective), by queue."""
        ...

    # -- the outbox and its relay -----------------------------------------------------
    def add_outbox(self, *, message_id: str, topic: str, payload: str, now: float) -> None:
        """An outbox message; ``payload`` its JSON text (the store seals it)."""
        ...

    def outbox_pending(self, limit: int) -> list[Row]:
        """Up to ``limit`` unpublished rows in outbox order (id, message_id, topic,
        payload as JSON text in clear, created_at, attempts)."""
        ...

    def mark_published(self, row_ids: Sequence[int], now: float) -> None:
        """Mark these rows published, each by its id."""
        ...

    def mark_outbox_error(self, row_id: int, error: str) -> None: ...

    def purge_published(self, *, before: float, limit: int) -> int:
        """Delete rows published before ``before`` (at most ``limit`` where the backend
        bounds the batch); how many went."""
        ...

    # -- effects, provider calls, revoked principals ---------------------------------
    def claim_effect(self, scope: str, key: str, now: float) -> bool:
        """Claim (scope, key) for an effect; False if it was claimed already."""
        ...

    def effect_result(self, scope: str, key: str) -> str | None:
        """The stored result of a claimed effect (JSON text in clear); None: unclaimed."""
        ...

    def set_effect_result(self, scope: str, key: str, result: str) -> None: ...

    def provider_call(self, reference: str) -> Row | None:
        """reference, provider, idempotency_key, request and result (JSON text in clear,
        result None until settled), status, attempts, created_at, updated_at."""
        ...

    def insert_provider_call(
        self, *, reference: str, provider: str, idempotency_key: str, request: str, now: float
    ) -> None: ...

    def count_provider_attempt(self, reference: str, now: float) -> None: ...

    def settle_provider_call(self, reference: str, status: str, result: str, now: float) -> None:
        """``status`` succeeded or failed; ``result`` JSON text (the store seals it)."""
        ...

    def revoke_principal(self, principal: str, reason: str, now: float) -> None: ...

    def restore_principal(self, principal: str) -> None: ...

    def principal_revoked(self, principal: str) -> str | None:
        """Why ``principal`` lost access, or None."""
        ...

    # -- reads: stats, the dashboard, the planner ------------------------------------
    def queue_counts(self, now: float) -> list[Row]:
        """One row per queue that has jobs, by queue: ready, delayed, reserved, stuck,
        succeeded, failed, cancelled, and ``oldest_ready_at`` (None: nothing ready)."""
        ...

    def failed_counts(self) -> list[Row]:
        """Failed jobs awaiting review per (owner, queue): ``n`` and the ``latest``
        finish, ordered by owner then queue."""
        ...

    def failed_recent(self, limit: int) -> list[Row]:
        """The latest failed jobs (id, queue, task, owner, attempts, last_error in clear,
        finished_at, record_id), newest first."""
        ...

    def service_times(self, queue: str, limit: int) -> list[float]:
        """Occupied seconds of the latest ``limit`` successful attempts of ``queue``,
        newest first."""
        ...

    def outbox_lag(self) -> Row:
        """Outbox rows not yet published (``pending``) and the oldest one's creation
        time (``oldest``, None when none waits)."""
        ...


class JobStore(Protocol):
    """Where jobs live. Every method of the policy code goes through one of these."""

    def transaction(self) -> AbstractContextManager[JobSession]:
        """A write transaction of the store's own; commits on leaving, rolls back on error."""
        ...

    def reading(self) -> AbstractContextManager[JobSession]:
        """A read-only transaction (on SQLite a deferred BEGIN, never queued for the write
        lock)."""
        ...

    def session(self, tx: Any) -> JobSession:
        """Work inside a transaction the store does not own (the caller commits it)."""
        ...

    def wakeup(self, queues: Iterable[str]) -> Wakeup:
        """How idle workers of ``queues`` are woken: LISTEN/NOTIFY or polling."""
        ...
