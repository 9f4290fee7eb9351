"""What a job is: the spec written at enqueue time and the leased job a worker holds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final, TypeGuard

from pigeon.checks import is_finite, is_int_in
from pigeon.exceptions import InvalidOperation, PayloadNotSerializable
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.sealed import JOB_PAYLOAD

JobId = int


class JobStatus(StrEnum):
    QUEUED = "queued"  # ready once scheduled_at has passed; before that it is "delayed"
    RESERVED = "reserved"  # leased by a worker until reserved_until
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # in the failed store, with an owner, awaiting review
    CANCELLED = "cancelled"


DEFAULT_MAX_ATTEMPTS = 5


class _Unset(Enum):
    """A retry-policy field the caller did not give (None already means "no age limit")."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET


@dataclass(frozen=True)
class JobSpec:
    """A job to enqueue; also how an obligation of a record names its job."""

    queue: str
    task: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    # Not given: the policy of the task registered on the app (``@app.task(max_attempts=...,
    # max_age=...)``), else DEFAULT_MAX_ATTEMPTS and no age limit. Given: this job's own.
    # max_age counts seconds from when the job is due (enqueue + delay; a reviewed retry
    # starts it again), so a delayed job is never too old before its first run.
    max_attempts: int | _Unset = UNSET
    max_age: float | _Unset | None = UNSET
    # Enqueue idempotency, not a lock: while a job with this key is kept, enqueueing the
    # key again returns that job's id and writes nothing, even once the job has finished
    # (unlike Procrastinate's queueing_lock or celery-once, which free the key when the
    # job starts or ends: to run the work again, use a new key). The key is freed when
    # retention purges the job (App.retention: a week after it succeeded or was
    # cancelled; failed jobs are kept until reviewed). Work that must never happen twice
    # over any span of time is guarded by an effect's key (ctx.effect), kept for good.
    unique_key: str | None = None
    owner: str | None = None
    # The version of the payload's shape (``@app.task(version=...)``). None: the version
    # of the task registered on the app, else 1. Given: a producer that knows the shape
    # it wrote (an older one is upcast by the worker that runs it).
    version: int | None = None

    def __post_init__(self) -> None:
        if not self.queue or not self.task:
            raise InvalidOperation(
                f"a job needs a queue and a task, got {self.queue!r}/{self.task!r}"
            )
        # The worker calls task(**payload): anything but an object with str keys can
        # never run, so it is refused here rather than retried for minutes.
        if not isinstance(self.payload, Mapping):
            raise InvalidOperation(
                f"payload of {self.queue}/{self.task} must be a JSON object (a mapping of "
                f"argument names), got {type(self.payload).__name__}"
            )
        bad_keys = [k for k in self.payload if not isinstance(k, str)]
        if bad_keys:
            raise InvalidOperation(
                f"payload of {self.queue}/{self.task} needs str keys, got {bad_keys[0]!r}"
            )
        if not isinstance(self.max_attempts, _Unset) and not positive_int(self.max_attempts):
            raise InvalidOperation(
                f"max_attempts must be an integer >= 1, got {self.max_attempts!r}"
            )
        if self.version is not None and not positive_int(self.version):
            raise InvalidOperation(f"version must be an integer >= 1, got {self.version!r}")
        if not finite(self.delay) or self.delay < 0:
            raise InvalidOperation(f"delay must be finite seconds >= 0, got {self.delay!r}")
        if not isinstance(self.max_age, _Unset | None) and (
            not finite(self.max_age) or self.max_age <= 0
        ):
            raise InvalidOperation(f"max_age must be finite seconds > 0, got {self.max_age!r}")

    def policy(
        self, max_attempts: int = DEFAULT_MAX_ATTEMPTS, max_age: float | None = None
    ) -> tuple[int, float | None]:
        """(max_attempts, max_age) to store: this spec's own where given, else the fallback
        passed in (the task's policy, or the defaults)."""
        attempts = max_attempts if isinstance(self.max_attempts, _Unset) else self.max_attempts
        age = max_age if isinstance(self.max_age, _Unset) else self.max_age
        return attempts, age

    def payload_json(self) -> str:
        return dump_payload(self.payload, f"{self.queue}/{self.task}")


def positive_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass, but True attempts is a mistake, not a policy
    return is_int_in(value, 1)


def finite(value: object) -> TypeGuard[int | float]:
    """A real number of seconds: NaN compares false with everything (a NaN delay or
    max_age would silently mean "never" or "always"), inf would never come due."""
    return is_finite(value)


def dump_payload(payload: Any, what: str) -> str:
    # allow_nan=False: NaN/Infinity are not JSON; PostgreSQL's jsonb and other readers
    # refuse them, and they would come back as floats no task expects.
    try:
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadNotSerializable(f"payload of {what} is not JSON: {exc}") from exc


@dataclass
class Job:
    """A job leased to one worker: (id, attempt, token) is what finishing compares on."""

    id: JobId
    queue: str
    task: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    attempt_base: int  # attempts already used before the last reviewed retry
    max_age: float | None
    created_at: float
    budget_start: float
    owner: str | None
    record_id: str | None
    obligation: str | None
    token: str
    # When the claim was made; the worker moves it to when the task begins (a job of a
    # batch waits behind the others), so an attempt's occupied time is the task's own.
    started_at: float = 0.0
    # The error its previous attempt left (None: none, or a first attempt): a job that
    # runs out of budget at its claim fails with it beside the reason.
    last_error: str | None = None
    # The version of ``payload``'s shape: the one it was enqueued with, until the worker
    # upcasts the payload to its task's version (``Task.before_run``).
    version: int = 1

    @classmethod
    def from_row(cls, row: Mapping[str, Any], now: float, cipher: Cipher = PLAIN) -> Job:
        task = row["task"]
        return cls(
            id=int(row["id"]),
            queue=row["queue"],
            task=task,
            payload=json.loads(cipher.open(row["payload"], *JOB_PAYLOAD.ad, task)),
            attempt=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            attempt_base=int(row["attempt_base"]),
            max_age=row["max_age"],
            created_at=float(row["created_at"]),
            budget_start=float(row["budget_start"]),
            owner=row["owner"],
            record_id=row["record_id"],
            obligation=row["obligation"],
            token=row["lease_token"],
            started_at=now,
            last_error=row.get("last_error"),
            version=int(row["version"]),
        )

    def key(self) -> dict[str, Any]:
        return {"id": self.id, "attempt": self.attempt, "token": self.token}


@dataclass(frozen=True)
class FailedJob:
    """A job that landed in the failed store, as handed to the app's alert hook."""

    id: JobId
    queue: str
    task: str
    owner: str
    error: str
    attempts: int
    record_id: str | None
