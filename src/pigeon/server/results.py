"""What one operation answers: an ``OpResult``, the problem+json refusals, and when the
store is down, the fail-closed 503."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import re
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pigeon.exceptions import StoreUnavailable
from pigeon.protocol.wire import AUTH_STATUSES, PROBLEM_JSON, TRANSIENT_4XX, canonical_json
from pigeon.server.identifiers import header_value
from pigeon.server.problems import problem
from pigeon.storage.base import Tx

log = logging.getLogger(__name__)

T = TypeVar("T")


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


# psycopg raises OperationalError for these SQLSTATE classes and codes, which mean the
# server or the connection cannot serve now: connection exception (08), a transaction
# aborted by contention (40: run again, see ``retried``), insufficient resources (53),
# operator intervention (57: shutdown, statement timeout), system error (58) and
# lock_not_available (55P03). The rest of what it raises as OperationalError, above all
# 54 "program limit exceeded" (a value too large for an index, too many columns), is the
# statement's own fault: it fails the same way on every run.
_PG_UNAVAILABLE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
_PG_UNAVAILABLE_STATES = frozenset({"55P03"})


def store_down(exc: BaseException) -> bool:
    """Is this one of ``STORE_DOWN`` because the store is unavailable, rather than a SQL
    error of the statement that raised it? Only the former fails a whole group or batch
    with 503; the latter is the failure of the one operation whose handler ran it (a
    503 for it would be sent again, and fail again, for ever, with its batch)."""
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is None or code & 0xFF in _SQLITE_UNAVAILABLE
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str) and not isinstance(exc, StoreUnavailable):
        # No SQLSTATE at all (the server never answered) stays "down".
        return state[:2] in _PG_UNAVAILABLE_CLASSES or state in _PG_UNAVAILABLE_STATES
    return isinstance(exc, STORE_DOWN)


# SQLSTATEs with which PostgreSQL aborts a transaction to settle contention, expecting it
# to be run again: serialization_failure and deadlock_detected. Not the rest of class 40
# (a deferred constraint violated at commit fails again however often it is run).
_CONTENTION_STATES = frozenset({"40001", "40P01"})
CONTENTION_RETRIES = 3  # runs after the first, each after a short random pause


def contended(exc: BaseException) -> bool:
    """Was the transaction aborted to break a deadlock or a serialization conflict? Then
    nothing of it committed and running it again is the cure, not a 503: the store is up,
    and the other transaction has already gone on. (The PostgreSQL backend wraps the
    driver's error in ``StoreUnavailable``: the cause chain is searched.)"""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "sqlstate", None) in _CONTENTION_STATES:
            return True
        current = current.__cause__
    return False


def retried(run: Callable[[], T], *, retries: int = CONTENTION_RETRIES) -> T:
    """``run()``, which opens and commits a transaction of its own, run again from the
    start while the database aborts it as a deadlock victim (at most ``retries`` more
    times). Only a whole transaction is run again: a part of one cannot be, its snapshot
    and the locks it took before the abort are gone with it."""
    attempt = 0
    while True:
        try:
            return run()
        except STORE_DOWN as exc:
            if attempt >= retries or not contended(exc):
                raise
            attempt += 1
            log.info("transaction aborted by contention, running it again (%d): %s", attempt, exc)
            # A random pause, growing: two victims of one another do not meet in step again.
            time.sleep(random.uniform(0, 0.01 * 2**attempt))


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
    if contended(exc):  # still a deadlock victim after CONTENTION_RETRIES runs
        detail = (
            "the database aborted the transaction to break a deadlock or serialization "
            f"conflict, {CONTENTION_RETRIES + 1} times; nothing was executed"
        )
    else:
        detail = "the idempotency store cannot be reached; nothing was executed"
    result = problem_result(503, "store-unavailable", "Service unavailable", detail)
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


def normalise(out: tuple[Any, ...]) -> tuple[int, Any, tuple[tuple[str, str], ...]]:
    """A handler's ``(status, body)`` or ``(status, body, headers)``, headers lower-cased."""
    if len(out) == 2:
        status, body = out
        headers: Mapping[str, str] = {}
    else:
        status, body, headers = out
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise TypeError(f"a handler must return an HTTP status, not {status!r}")
    for name in headers:
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            # Raised in the handler's savepoint: nothing commits, rather than a write
            # that commits and then cannot be answered.
            raise TypeError(f"a handler returned a header name that is no HTTP token: {name!r}")
    # Values encoded now, before they are stored: a stored header is replayed on every
    # retry, and one that cannot be sent (a non-ASCII Location) failed each of them.
    return status, body, tuple((k.lower(), header_value(str(v))) for k, v in headers.items())


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
