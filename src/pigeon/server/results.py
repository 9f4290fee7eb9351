"""What one operation answers: an ``OpResult``, the problem+json refusals, and when the
store is down, the fail-closed 503."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pigeon.exceptions import StoreUnavailable
from pigeon.protocol.wire import AUTH_STATUSES, PROBLEM_JSON, TRANSIENT_4XX, canonical_json
from pigeon.server.problems import problem
from pigeon.storage.base import Tx

log = logging.getLogger(__name__)


def _store_down_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [StoreUnavailable, sqlite3.OperationalError]
    with contextlib.suppress(ImportError):
        import psycopg

        errors.append(psycopg.OperationalError)
    return tuple(errors)


# Errors that mean "the store cannot be used right now": the intake fails closed (503).
STORE_DOWN = _store_down_errors()

# SQLite's primary result codes that mean the file cannot be used now, as opposed to
# SQLITE_ERROR (1), which is a statement's own fault (a handler's bad SQL, a missing
# column): BUSY, LOCKED, NOMEM, READONLY, INTERRUPT, IOERR, CORRUPT, FULL, CANTOPEN,
# PROTOCOL, NOTADB.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 26})


def store_down(exc: BaseException) -> bool:
    """Is this one of ``STORE_DOWN`` because the store is unavailable, rather than a SQL
    error of the statement that raised it? Only the former fails a whole group or batch
    with 503; the latter is the failure of the one operation whose handler ran it."""
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is None or code & 0xFF in _SQLITE_UNAVAILABLE
    return isinstance(exc, STORE_DOWN)


# 4xx answers that mean "not now" rather than "no": the client sends the same key again
# (408, 425 and 429 are transient in DESIGN.md's classification; on 401/403 the queue
# pauses until the user is signed in again, then resumes). Stored, such an answer would be
# replayed to every retry and the operation could never run, so, like a 5xx, it releases
# the key and nothing is kept.
NOT_STORED_4XX = TRANSIENT_4XX | AUTH_STATUSES


def stored(status: int) -> bool:
    """Is an answer with this status, once the handler ran, the key's final answer?"""
    return status < 500 and status not in NOT_STORED_4XX


@dataclass(frozen=True, slots=True)
class OpResult:
    status: int
    body_text: str  # exactly what goes on the wire (stored text for replays)
    headers: tuple[tuple[str, str], ...] = ()
    replayed: bool = False
    transient: bool = False  # a batch stops after this result
    committed_key: str | None = None  # set when this result's effect was committed now
    # A replay whose route asked for the current state: called with a read-only
    # transaction once the deciding transaction has ended; returns the body to send.
    refresh: Callable[[Tx], Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def body(self) -> Any:
        return json.loads(self.body_text) if self.body_text else None


def problem_result(status: int, slug: str, title: str, detail: str, **extra: Any) -> OpResult:
    body = canonical_json(problem(status, slug, title, detail, **extra))
    return OpResult(status, body, (("content-type", PROBLEM_JSON),), transient=status >= 500)


def store_unavailable(exc: BaseException) -> OpResult:
    """Fail closed: without the store there is no dedup, so nothing may run."""
    log.warning("idempotency store unavailable: %s", exc)
    result = problem_result(
        503,
        "store-unavailable",
        "Service unavailable",
        "the idempotency store cannot be reached; nothing was executed",
    )
    return dataclasses.replace(result, headers=(*result.headers, ("retry-after", "1")))


def lost_claim(key: str) -> OpResult:
    """Our lock expired and another request took the key over: it now owns the effect."""
    result = problem_result(
        409,
        "key-in-progress",
        "Request in progress",
        f"the claim on key {key!r} expired and was taken over; retry later",
    )
    return dataclasses.replace(
        result, transient=True, headers=(*result.headers, ("retry-after", "1"))
    )
