"""What the jobs store and its callers share beneath both: the typed rows its sessions
read and write (``NewJob`` in, ``JobRow``, ``RecordRow``, ... out), the ledger's states and
how a JSON value sits in a text column.

Both the store implementations (``pigeon.jobs.stores``) and the modules that call them
(``ledger``, ``records``, ``effects``, ...) import this module, and it imports neither, so
neither side reaches the other through it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

# Record states (pigeon_record_events.state), in the order they usually happen.
ACCEPTED = "accepted"
ATTEMPT = "attempt"
PROVIDER_RESULT = "provider_result"
OBLIGATION_COMPLETED = "obligation_completed"
OBLIGATION_FAILED = "obligation_failed"
OBLIGATION_RETRIED = "obligation_retried"
OBLIGATION_CANCELLED = "obligation_cancelled"
COMPLETED = "completed"

# The ledger state recorded when an obligation moves to a status.
SETTLED_STATE = {
    "completed": OBLIGATION_COMPLETED,
    "failed": OBLIGATION_FAILED,
    "pending": OBLIGATION_RETRIED,
    "cancelled": OBLIGATION_CANCELLED,
}


def dumps(value: Any) -> str:
    """``value`` as the JSON text a column keeps (sorted keys, compact)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def loads(text: str | None) -> Any:
    """A JSON column's value; a NULL column (None) stays None."""
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class NewJob:
    """A job to insert (``EnqueueSession.insert_job``); ``payload`` its JSON text (the
    store seals it), ``now`` its creation time."""

    queue: str
    task: str
    payload: str
    max_attempts: int
    max_age: float | None
    now: float
    scheduled_at: float
    owner: str | None = None
    record_id: str | None = None
    obligation: str | None = None
    unique_key: str | None = None
    version: int = 1  # of the payload's shape (pigeon.jobs.versions)


class JobRow(TypedDict):
    """A job as the failed store reads it (``get_job``, ``list_jobs``): every column,
    the payload as JSON text and the last error in clear."""

    id: int
    queue: str
    task: str
    payload: str
    status: str
    attempts: int
    max_attempts: int
    attempt_base: int
    max_age: float | None
    created_at: float
    budget_start: float
    scheduled_at: float
    reserved_until: float | None
    lease_token: str | None
    worker: str | None
    claimed_at: float | None
    started_at: float | None
    finished_at: float | None
    last_error: str | None
    owner: str | None
    record_id: str | None
    obligation: str | None
    unique_key: str | None
    version: int


class AttemptRow(TypedDict):
    """One attempt of a job (``attempts_of``); its error in clear."""

    attempt: int
    worker: str | None
    started_at: float | None
    finished_at: float | None
    outcome: str
    error: str | None


class ReviewRow(TypedDict):
    """A reviewed retry or cancel of a job (``reviews_of``)."""

    action: str
    reviewer: str
    reason: str
    at: float


class RecordRow(TypedDict):
    """A record (``get_record``); ``data`` its JSON text in clear."""

    id: str
    kind: str
    data: str
    status: str
    created_at: float
    completed_at: float | None
    principal: str | None


class ObligationRow(TypedDict):
    """One obligation of a record (``obligations_of``)."""

    record_id: str
    name: str
    job_id: int
    status: str
    updated_at: float


class EventRow(TypedDict):
    """One recorded state of a record (``events_of``); ``detail`` JSON text in clear."""

    id: int
    obligation: str | None
    state: str
    detail: str | None
    at: float


class Pressure(TypedDict):
    """A queue's waiting backlog (each part counted up to a cap) and when its oldest
    waiting job became due (``queue_pressure``)."""

    backlog: int
    oldest_ready_at: float | None


class QueueCounts(TypedDict):
    """One queue's jobs by state (``queue_counts``)."""

    queue: str
    ready: int
    delayed: int
    reserved: int
    stuck: int
    succeeded: int
    failed: int
    cancelled: int
    oldest_ready_at: float | None


class FailedCount(TypedDict):
    """Failed jobs awaiting review of one (owner, queue) (``failed_counts``)."""

    owner: str | None
    queue: str
    n: int
    latest: float | None


class FailedRecent(TypedDict):
    """A recent failed job (``failed_recent``); its last error in clear."""

    id: int
    queue: str
    task: str
    owner: str | None
    attempts: int
    last_error: str | None
    finished_at: float | None
    record_id: str | None


class OutboxRow(TypedDict):
    """An unpublished outbox message (``outbox_pending``); ``payload`` JSON text in clear."""

    id: int
    message_id: str
    topic: str
    payload: str
    created_at: float
    attempts: int


class OutboxLag(TypedDict):
    """Unpublished outbox rows and the oldest one's creation time (``outbox_lag``)."""

    pending: int
    oldest: float | None


class ProviderCall(TypedDict):
    """A provider call (``provider_call``); request and result JSON text in clear, the
    result None until settled."""

    reference: str
    provider: str
    idempotency_key: str
    request: str
    status: str
    result: str | None
    attempts: int
    created_at: float
    updated_at: float


class WorkerRow(TypedDict):
    """A worker process in the registry (``workers_seen``): the queues it serves and the
    payload version of each task its app runs, both JSON text; when it started and when
    it last renewed its row."""

    name: str
    origin: str
    queues: str
    versions: str
    started_at: float
    seen_at: float


class Breach(TypedDict):
    """An open freshness breach episode (``breaches``)."""

    queue: str
    since: float
    age: float
    objective: float
