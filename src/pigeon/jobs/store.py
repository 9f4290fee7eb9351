"""The jobs component's store, split by role: what each consumer asks of the database.

A ``JobStore`` opens work on the database (``transaction``, ``reading``); the work is done
through its session, whose methods are the job component's statements. No consumer sees
every statement: each declares the role it uses (the job manager a ``LeaseSession``, the
failed store a ``FailedSession``, ...) and takes a ``JobStore[ThatRole]``. A session class
of ``pigeon.jobs.stores`` (SQLite, PostgreSQL, in memory) implements every role, so one
store serves them all; ``tests/unit/jobs/test_roles.py`` keeps each role small and every
session class complete.

The helpers that run in a transaction the caller opened (``records.accept``, ``outbox.add``,
``access.*``, ``ledger.*``, ``effects.effect_in``) take that storage ``Tx`` and reach the
jobs session on it through ``pigeon.jobs.stores.session_for``. The policy code never asks
which backend it runs on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pigeon.jobs.job import Job, JobId
from pigeon.jobs.rows import (
    AttemptRow,
    Breach,
    EventRow,
    FailedCount,
    FailedRecent,
    JobRow,
    NewJob,
    ObligationRow,
    OutboxLag,
    OutboxRow,
    Pressure,
    ProviderCall,
    QueueCounts,
    RecordRow,
    ReviewRow,
    WorkerRow,
)

if TYPE_CHECKING:
    from pigeon.jobs.wakeup import Wakeup
    from pigeon.storage.base import Tx


class LedgerSession(Protocol):
    """The obligations ledger (``ledger.py``, and every role that settles obligations)."""

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

    def complete_record(self, record_id: str, now: float) -> bool:
        """Mark the record completed; False if it already was."""
        ...


# In a claim's ``versions``: the version of every task not named in it. Never a job's
# task: a JobSpec refuses an empty one.
ANY_TASK = ""


class EnqueueSession(Protocol):
    """Writing a job (``manager.enqueue`` and whoever enqueues in its transaction)."""

    def insert_job(self, job: NewJob) -> JobId:
        """Insert a job; a ``unique_key`` already used returns the existing job's id."""
        ...


class LeaseSession(EnqueueSession, LedgerSession, Protocol):
    """A job's life: claims, starts, leases and finishes (the ``JobManager``)."""

    def claim_due(
        self, *, queue: str, worker: str, token: str, now: float, until: float, n: int,
        start: int, versions: Mapping[str, int],
    ) -> list[Job]:  # fmt: skip
        """Lease up to ``n`` eligible jobs (ready, or with an expired lease), their attempts
        opened; the jobs in due order (scheduled_at, id), each with its ``last_error``. The
        first ``start`` are marked started now (the caller runs them at once); the others
        are claimed, not started, and still count as waiting until ``mark_started``.
        ``versions``: the newest payload version the claimer runs per task; a job of a
        newer version, or of a task absent from it, is not taken. The key ``ANY_TASK``
        stands for every task absent (an app-less manager's ``{ANY_TASK: 1}``)."""
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

    def queue_pressure(self, queue: str, now: float, cap: int) -> Pressure | None: ...


class RecordSession(EnqueueSession, LedgerSession, Protocol):
    """Records and their obligations (``records.accept``, ``get``, ``view``)."""

    def insert_record(
        self, *, record_id: str, kind: str, data: str, principal: str | None, now: float
    ) -> None:
        """A record, ``received``; ``data`` its JSON text (the store seals it)."""
        ...

    def insert_obligation(self, record_id: str, name: str, job_id: JobId, now: float) -> None:
        """A pending obligation of the record, settled by its job."""
        ...

    def job_by_unique_key(self, unique_key: str) -> JobId | None: ...

    def get_record(self, record_id: str) -> RecordRow | None: ...

    def obligations_of(self, record_id: str) -> list[ObligationRow]:
        """The record's obligations, by name."""
        ...

    def events_of(self, record_id: str) -> list[EventRow]:
        """The record's recorded states, oldest first."""
        ...


class FailedSession(LedgerSession, Protocol):
    """The failed store: its reads and its reviewed retries and cancels (``failed.py``)."""

    def get_job(self, job_id: JobId) -> JobRow | None: ...

    def list_jobs(self, *, status: str | None, queue: str | None, limit: int) -> list[JobRow]: ...

    def attempts_of(self, job_id: JobId) -> list[AttemptRow]: ...

    def reviews_of(self, job_id: JobId) -> list[ReviewRow]: ...

    def review(self, job_id: JobId, action: str, now: float) -> bool:
        """``action`` "retry" or "cancel"; False if the job's status does not allow it."""
        ...

    def record_review(
        self, job_id: JobId, *, action: str, reviewer: str, reason: str, now: float
    ) -> None: ...

    def notify_ready(self, queue: str) -> None:
        """A job of ``queue`` became ready other than by insert: wake idle workers."""
        ...


class MaintenanceSession(EnqueueSession, Protocol):
    """Retention and schedules (``retention.py``, ``schedule.py``)."""

    def purge_finished(self, *, before: float, limit: int) -> int: ...

    def purge_ticks(self, *, schedule: str, before_tick: int, limit: int) -> int: ...

    def take_tick(self, schedule: str, tick: int, now: float) -> bool: ...

    def set_tick_job(self, schedule: str, tick: int, job_id: JobId) -> None: ...


class OutboxSession(Protocol):
    """The outbox: written by ``outbox.add``, read and marked by the ``Relay``."""

    def add_outbox(self, *, message_id: str, topic: str, payload: str, now: float) -> None:
        """An outbox message; ``payload`` its JSON text (the store seals it)."""
        ...

    def outbox_pending(self, limit: int) -> list[OutboxRow]:
        """Up to ``limit`` unpublished rows in outbox order."""
        ...

    def mark_published(self, row_ids: Sequence[int], now: float) -> None:
        """Mark these rows published, each by its id."""
        ...

    def mark_outbox_error(self, row_id: int, error: str) -> None: ...

    def purge_published(self, *, before: float, limit: int) -> int:
        """Delete rows published before ``before`` (at most ``limit`` where the backend
        bounds the batch); how many went."""
        ...


class CallbackSession(Protocol):
    """What hands application callbacks (a task's access re-check, an effect's mutation)
    their transaction (``App``'s tasks, ``effects.py``)."""

    @property
    def tx(self) -> Tx:
        """The storage ``Tx`` this session works in (on the in-memory store, one that runs
        no SQL, which the jobs helpers still accept)."""
        ...


class EffectSession(CallbackSession, Protocol):
    """Effect claims and their results (``effects.py``)."""

    def claim_effect(self, scope: str, key: str, now: float) -> bool:
        """Claim (scope, key) for an effect; False if it was claimed already."""
        ...

    def effect_result(self, scope: str, key: str) -> str | None:
        """The stored result of a claimed effect (JSON text in clear); None: unclaimed."""
        ...

    def set_effect_result(self, scope: str, key: str, result: str) -> None: ...


class ProviderSession(LedgerSession, Protocol):
    """Provider calls made safe to repeat (``providers.py``)."""

    def provider_call(self, reference: str) -> ProviderCall | None: ...

    def insert_provider_call(
        self, *, reference: str, provider: str, idempotency_key: str, request: str, now: float
    ) -> None: ...

    def count_provider_attempt(self, reference: str, now: float) -> None: ...

    def settle_provider_call(self, reference: str, status: str, result: str, now: float) -> None:
        """``status`` succeeded or failed; ``result`` JSON text (the store seals it)."""
        ...


class AccessSession(Protocol):
    """Revoked principals (``access.py``)."""

    def revoke_principal(self, principal: str, reason: str, now: float) -> None: ...

    def restore_principal(self, principal: str) -> None: ...

    def principal_revoked(self, principal: str) -> str | None:
        """Why ``principal`` lost access, or None."""
        ...


class StatsSession(Protocol):
    """The figures: stats, the dashboard, the planner, freshness (``stats.py``)."""

    def queue_counts(self, now: float) -> list[QueueCounts]:
        """One row per queue that has jobs, by queue (``oldest_ready_at`` None: nothing
        ready)."""
        ...

    def queue_pressure(self, queue: str, now: float, cap: int) -> Pressure | None: ...

    def failed_counts(self) -> list[FailedCount]:
        """Failed jobs awaiting review per (owner, queue), ordered by owner then queue."""
        ...

    def failed_recent(self, limit: int) -> list[FailedRecent]:
        """The latest failed jobs, newest first."""
        ...

    def service_times(self, queue: str, limit: int) -> list[float]:
        """Occupied seconds of the latest ``limit`` successful attempts of ``queue``,
        newest first."""
        ...

    def outbox_lag(self) -> OutboxLag: ...

    def open_breach(self, *, queue: str, now: float, age: float, objective: float) -> bool: ...

    def close_breach(self, queue: str) -> None: ...

    def breaches(self) -> list[Breach]:
        """The open breach episodes, by queue."""
        ...


class WorkerSession(Protocol):
    """The workers' registry (``registry.py``): a row per live worker process, saying
    which queues it serves and which payload version of each task it runs."""

    def advertise_worker(self, row: WorkerRow) -> None:
        """Write (or renew) the worker's row."""
        ...

    def withdraw_worker(self, name: str) -> None: ...

    def forget_workers(self, before: float) -> int:
        """Delete the rows not renewed since ``before`` (workers gone without a word)."""
        ...

    def workers_seen(self, since: float) -> list[WorkerRow]:
        """The rows renewed since ``since``, by name."""
        ...


# Every role, for the test that keeps them small and the session classes complete.
ROLES: tuple[type, ...] = (
    LedgerSession,
    EnqueueSession,
    LeaseSession,
    RecordSession,
    FailedSession,
    MaintenanceSession,
    OutboxSession,
    CallbackSession,
    EffectSession,
    ProviderSession,
    AccessSession,
    StatsSession,
    WorkerSession,
)

S_co = TypeVar("S_co", covariant=True)


class JobStore(ABC, Generic[S_co]):
    """Where jobs live; its sessions serve the role ``S_co``. A consumer takes the store of
    the role it uses (``JobStore[FailedSession]``); pigeon's stores serve every role."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[S_co]:
        """A write transaction of the store's own; commits on leaving, rolls back on error."""

    @abstractmethod
    def reading(self) -> AbstractContextManager[S_co]:
        """A read-only transaction (on SQLite a deferred BEGIN, never queued for the write
        lock)."""

    @abstractmethod
    def wakeup(self, queues: Iterable[str]) -> Wakeup:
        """How idle workers of ``queues`` are woken: LISTEN/NOTIFY or polling."""
