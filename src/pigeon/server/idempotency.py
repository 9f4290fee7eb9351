"""Idempotency claims: who holds a key, what it answered, and for how long.

The store works inside a transaction it is handed (``pigeon.storage.base.Tx``) and asks
for SQL by name, so the intake can put the claim, the application's writes and the
stored response in ONE commit, and the same code runs on SQLite and PostgreSQL.

Lifetimes (all decided by timestamps at read time, never by whether a purge ran):

- ``lock_timeout`` (10 s): how long an ``in_progress`` claim is honoured. A claim left
  behind by a dead process (only possible when the claim is committed before the work,
  see ``Intake(claim_mode="separate")`` and the middleware) may be taken over after it:
  a retry after a crash runs within that bound. A live holder is never taken over: the
  intake's work keeps the claim row locked (PostgreSQL) or the one write lock (SQLite),
  and the middleware renews its claim every third of the timeout.
- ``response_retention`` (24 h): the stored status and body are replayed verbatim.
- ``claim_retention`` (30 days): after the response is gone the key still answers
  "already applied" with the original operation id; only after this the key is free.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from pigeon.checks import is_finite
from pigeon.core.wire import canonical_json
from pigeon.exceptions import ConfigurationError
from pigeon.storage.base import Row, Tx
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.errors import lock_timed_out
from pigeon.storage.sealed import RESPONSE_BODY
from pigeon.storage.writer_lock import WriterLock

DAY = 24 * 3600.0
PURGE_BATCH = 5000  # rows per purge transaction, so no purge holds a long one
# How long a claim waits for another transaction holding the same key (PostgreSQL: a
# duplicate in another process whose original has not committed yet) before it is
# answered 409 "in progress". Within one process ``pigeon.server.inflight`` answers first.
CLAIM_WAIT = 0.5


class KeyBusy(Exception):
    """Another transaction holds this key right now (the claim's bounded wait ran out).

    Raised out of the claim's transaction, which the database has aborted: the caller
    answers 409 with ``Retry-After`` for this operation (nothing of its transaction
    committed)."""

    def __init__(self, key: str, retry_after: int = 1) -> None:
        super().__init__(f"key {key!r} is held by another transaction")
        self.key = key
        self.retry_after = retry_after


class ClaimLost(Exception):
    """The stored answer, sent with the COMMIT (``complete(last=True)``), found the claim
    no longer this transaction's: nothing of the transaction committed."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the claim of key {key!r} was lost before its answer was stored")
        self.key = key


class _LockTokens:
    """Claim tokens: unique, never reused, never shown to a client (they fence a claim
    against whoever takes it over). A random prefix per process and a counter: no system
    call per claim, where ``uuid4`` asks ``os.urandom`` (and lets go of the interpreter
    lock) every time. A forked child draws a new prefix."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._prefix = os.urandom(12).hex()
        self._count = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            n = next(self._count)
        return f"{self._prefix}{n:x}"


_tokens = _LockTokens()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_tokens._reset)


def new_token() -> str:
    """A new claim token (unique in this process and, by its random prefix, beyond)."""
    return _tokens.next()


@dataclass(frozen=True, slots=True)
class IdempotencyPolicy:
    """Seconds an in-progress claim left by a dead process blocks its key, a stored
    response is kept, and a key is kept; each finite, and in that order."""

    lock_timeout: float = 10.0
    response_retention: float = DAY
    claim_retention: float = 30 * DAY

    def __post_init__(self) -> None:
        for name in ("lock_timeout", "response_retention", "claim_retention"):
            # An infinite lifetime (inf <= inf) would reach stored expiry times and the
            # Retry-After arithmetic; NaN passes every comparison.
            if not is_finite(getattr(self, name)):
                raise ConfigurationError(
                    f"{name} is {getattr(self, name)}, not a finite number of seconds",
                    field=name,
                )
        if not self.lock_timeout > 0:
            raise ConfigurationError(
                f"lock_timeout must be positive, not {self.lock_timeout}", field="lock_timeout"
            )
        if not self.lock_timeout <= self.response_retention <= self.claim_retention:
            late = "response_retention" if self.response_retention < self.lock_timeout else None
            raise ConfigurationError(
                "expected lock_timeout <= response_retention <= claim_retention, got "
                f"{self.lock_timeout} / {self.response_retention} / {self.claim_retention}",
                field=late or "claim_retention",
            )


class ClaimOutcome(enum.StrEnum):
    FRESH = "fresh"  # no live claim: this request runs
    TAKE_OVER = "take_over"  # a dead claim (expired lock or retention): this request runs
    REPLAY = "replay"  # completed, response still stored
    ALREADY_APPLIED = "already_applied"  # completed, response purged, claim still alive
    IN_PROGRESS = "in_progress"  # another request holds the key right now
    MISMATCH = "mismatch"  # same key, different request


def decide_claim(row: Row | None, fingerprint: str, now: float) -> ClaimOutcome:
    """What an incoming request with this fingerprint meets in the claim ``row``. Pure."""
    if row is None:
        return ClaimOutcome.FRESH
    if row["claim_expires_at"] <= now:
        return ClaimOutcome.TAKE_OVER
    if row["fingerprint"] != fingerprint:
        return ClaimOutcome.MISMATCH
    if row["state"] == "in_progress":
        locked_until = row["locked_until"]
        return ClaimOutcome.IN_PROGRESS if locked_until > now else ClaimOutcome.TAKE_OVER
    if row["response_body"] is not None and row["response_expires_at"] > now:
        return ClaimOutcome.REPLAY
    return ClaimOutcome.ALREADY_APPLIED


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status: int
    body: str  # JSON text, plain text or base64, per ``body_format``
    headers: tuple[tuple[str, str], ...] = ()
    body_format: str = "json"  # "json" | "text" | "base64"


@dataclass(frozen=True, slots=True)
class Claim:
    """A key this process now holds; the token fences out anyone who took it over."""

    principal: str
    key: str
    token: str
    operation_id: str


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    outcome: ClaimOutcome
    claim: Claim | None = None
    response: StoredResponse | None = None
    operation_id: str | None = None
    original_status: int | None = None
    completed_at: float | None = None
    retry_after: int = 0

    @property
    def runs(self) -> bool:
        return self.claim is not None


# The stored body is sealed when a keyring is configured, bound to its (principal, key).
BODY_AD = RESPONSE_BODY.ad


def headers_json(pairs: Sequence[Sequence[str]]) -> str:
    """A stored answer's headers as its claim row keeps them, a JSON list of [name, value]:
    one text whichever path stored the answer (one key, a batch's keys at once, the memory
    store)."""
    return canonical_json(pairs)


def stored_response(row: Row, cipher: Cipher = PLAIN) -> StoredResponse:
    """The stored response of a claim row (a replay's answer)."""
    return _response(row, cipher)


def _response(row: Row, cipher: Cipher = PLAIN) -> StoredResponse:
    headers = json.loads(row["response_headers"] or "[]")
    return StoredResponse(
        status=int(row["status"]),
        body=cipher.open(row["response_body"], *BODY_AD, row["principal"], row["idem_key"]),
        headers=tuple((str(k), str(v)) for k, v in headers),
        body_format=row["body_format"] or "json",
    )


class IdempotencyStore(Protocol):
    """What the intake (and the middleware) ask of the claims' store: transactions, and
    claims of (principal, key) pairs inside a transaction.

    Every claim method works inside a transaction it is handed and does not own: one of
    the store's own (``transaction``) or one the application opened on its own connection
    (``pigeon.storage.server.borrow``), so the claim, the application's writes, pigeon's
    jobs and the stored response can commit together, whoever commits. Implementations:
    ``SQLiteIdempotencyStore`` and ``PostgresIdempotencyStore``
    (``pigeon.server.idempotency_stores``, one SQL text per backend, the same statements
    by name) and ``MemoryIdempotencyStore`` (``pigeon.server.idempotency_memory``, for the
    unit tier). ``idempotency_store(db)`` picks the one for a database."""

    policy: IdempotencyPolicy

    @property
    def single_writer(self) -> bool:
        """Do write transactions run one at a time (SQLite, memory)? Then requests that
        arrive together are better committed as one group (``create_app(group_commit=)``)."""
        ...

    def transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction of the store's own: leaving it commits."""
        ...

    def read_only(self) -> AbstractContextManager[Tx]:
        """A transaction that refuses writes (the replay hooks' reads)."""
        ...

    def turn_at_once(self) -> AbstractContextManager[bool]:
        """The store's write turn held for the block if it is free now (True: the block's
        transactions wait for nobody), else not (False). A single writer's; a store whose
        transactions run side by side has none to give (False)."""
        ...

    def claim(
        self,
        tx: Tx,
        *,
        principal: str,
        key: str,
        fingerprint: str,
        method: str,
        path: str,
        operation_id: str,
    ) -> ClaimDecision: ...

    def fence(self, tx: Tx, claim: Claim) -> bool: ...

    def renew(self, tx: Tx, claim: Claim) -> bool: ...

    def complete(
        self, tx: Tx, claim: Claim, response: StoredResponse, *, last: bool = False
    ) -> bool: ...

    def release(self, tx: Tx, claim: Claim) -> bool: ...

    def get(self, tx: Tx, principal: str, key: str) -> Row | None: ...

    def purge(self, tx: Tx, limit: int = PURGE_BATCH) -> tuple[int, int]: ...

    def stats(self, tx: Tx) -> Mapping[str, int]: ...


@contextlib.contextmanager
def held_if_free(lock: WriterLock | threading.RLock) -> Iterator[bool]:
    """``lock`` held for the block if it can be had without waiting (True), else False."""
    taken = lock.acquire(blocking=False)
    try:
        yield taken
    finally:
        if taken:
            lock.release()


def check_claim_wait(claim_wait: float) -> float:
    if not 0 < claim_wait <= 60:
        raise ConfigurationError(f"claim_wait must be in (0, 60] seconds, not {claim_wait}")
    return claim_wait


class SqlIdempotencyStore:
    """Claims of (principal, key) pairs in SQL asked for by name, inside transactions
    handed in by the caller (an application's own, `pigeon.integrations`): the same code on
    SQLite and PostgreSQL, each backend's text in its ``intake.sql``. It opens no
    transaction: the backends' stores (``pigeon.server.idempotency_stores``), bound to a
    database, open their own, and are the ``IdempotencyStore``s."""

    single_writer = False

    def __init__(
        self,
        policy: IdempotencyPolicy | None = None,
        *,
        now: Callable[[], float] = time.time,
        claim_wait: float = CLAIM_WAIT,
    ) -> None:
        self.policy = policy or IdempotencyPolicy()
        self.now = now
        self.claim_wait = check_claim_wait(claim_wait)

    def claim(
        self,
        tx: Tx,
        *,
        principal: str,
        key: str,
        fingerprint: str,
        method: str,
        path: str,
        operation_id: str,
    ) -> ClaimDecision:
        """Take the key for this request, or say why it must not run."""
        now = self.now()
        params: dict[str, Any] = {
            "principal": principal,
            "idem_key": key,
            "fingerprint": fingerprint,
            "method": method,
            "path": path,
            "operation_id": operation_id,
            "lock_token": _tokens.next(),
            "locked_until": now + self.policy.lock_timeout,
            "claim_expires_at": now + self.policy.claim_retention,
            "now": now,
            "claim_wait": f"{max(1, round(self.claim_wait * 1000))}ms",
        }
        claim = Claim(principal, key, params["lock_token"], operation_id)
        # Two rounds at most: a lost race on insert or take-over is followed by one more
        # read, which then sees the winner's row.
        for _ in range(3):
            if self._took(tx, "claim_insert", params):
                return ClaimDecision(ClaimOutcome.FRESH, claim=claim, operation_id=operation_id)
            row = tx.fetchone("claim_get", params)
            outcome = decide_claim(row, fingerprint, now)
            if outcome is ClaimOutcome.FRESH:
                continue  # the row vanished (purged or released) between the two statements
            if outcome is ClaimOutcome.TAKE_OVER:
                if self._took(tx, "claim_take_over", params):
                    return ClaimDecision(
                        ClaimOutcome.TAKE_OVER, claim=claim, operation_id=operation_id
                    )
                continue
            assert row is not None
            return self._refusal(outcome, row, now, tx.cipher)
        raise RuntimeError(f"could not settle the claim of key {key!r} after three rounds")

    @staticmethod
    def _took(tx: Tx, name: str, params: Mapping[str, Any]) -> bool:
        """Did statement ``name`` take the key? (SQLite returns the row or none;
        PostgreSQL always one row, whose idem_key is NULL when it did not.)"""
        try:
            row = tx.fetchone(name, params)
        except Exception as exc:
            if lock_timed_out(exc):  # the bounded wait above ran out
                raise KeyBusy(str(params["idem_key"])) from exc
            raise
        return row is not None and row["idem_key"] is not None

    def _refusal(
        self, outcome: ClaimOutcome, row: Row, now: float, cipher: Cipher = PLAIN
    ) -> ClaimDecision:
        if outcome is ClaimOutcome.IN_PROGRESS:
            wait = max(1, math.ceil(row["locked_until"] - now))
            return ClaimDecision(outcome, operation_id=row["operation_id"], retry_after=wait)
        if outcome is ClaimOutcome.MISMATCH:
            return ClaimDecision(outcome, operation_id=row["operation_id"])
        return ClaimDecision(
            outcome,
            response=_response(row, cipher) if outcome is ClaimOutcome.REPLAY else None,
            operation_id=row["operation_id"],
            original_status=row["status"],
            completed_at=row["completed_at"],
        )

    def fence(self, tx: Tx, claim: Claim) -> bool:
        """Is the claim still ours? (False once a taker replaced our token.)"""
        return tx.fetchone("claim_fence", self._key_params(claim)) is not None

    def renew(self, tx: Tx, claim: Claim) -> bool:
        """Hold the claim for another ``lock_timeout`` from now; False if it was lost."""
        params = self._key_params(claim) | {"locked_until": self.now() + self.policy.lock_timeout}
        return tx.fetchone("claim_renew", params) is not None

    def complete(
        self, tx: Tx, claim: Claim, response: StoredResponse, *, last: bool = False
    ) -> bool:
        """Store the response and mark the key completed; False if the claim was lost.

        ``last``: nothing but the COMMIT follows in ``tx``. A transaction that can
        (``finish_with``: PostgreSQL's own) then sends it with the COMMIT, one round trip
        less, and a lost claim raises ``ClaimLost`` out of the commit, nothing committed."""
        params = self.completion(tx.cipher, claim, response)
        finish = getattr(tx, "finish_with", None) if last else None
        if finish is not None:
            finish("claim_complete_last", params, ClaimLost(claim.key))
            return True
        return tx.fetchone("claim_complete", params) is not None

    def completion(self, cipher: Cipher, claim: Claim, response: StoredResponse) -> dict[str, Any]:
        """The parameters of ``claim_complete`` (and ``claim_complete_last``) that store
        ``response`` under ``claim``, its body sealed with ``cipher``."""
        now = self.now()
        return self._key_params(claim) | {
            "status": response.status,
            "response_headers": headers_json(response.headers),
            "response_body": cipher.seal(response.body, *BODY_AD, claim.principal, claim.key),
            "body_format": response.body_format,
            "now": now,
            "response_expires_at": now + self.policy.response_retention,
        }

    def release(self, tx: Tx, claim: Claim) -> bool:
        """Give the key back so a retry runs (after a crash-free failure)."""
        return tx.fetchone("claim_release", self._key_params(claim)) is not None

    def get(self, tx: Tx, principal: str, key: str) -> Row | None:
        return tx.fetchone("claim_get", {"principal": principal, "idem_key": key})

    def purge(self, tx: Tx, limit: int = PURGE_BATCH) -> tuple[int, int]:
        """Drop expired responses and expired claims: (responses purged, claims deleted).

        Every backend stops at ``limit`` rows of each, oldest expiry first: call again,
        in a new transaction, while a count reaches it (``Intake.purge`` does).
        """
        params = {"now": self.now(), "limit": limit}
        return len(tx.fetchall("purge_responses", params)), len(tx.fetchall("purge_claims", params))

    def stats(self, tx: Tx) -> Mapping[str, int]:
        row = tx.fetchone("claim_stats")
        assert row is not None
        return {k: int(v) for k, v in row.items()}

    @staticmethod
    def _key_params(claim: Claim) -> dict[str, Any]:
        return {"principal": claim.principal, "idem_key": claim.key, "lock_token": claim.token}
