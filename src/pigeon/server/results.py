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
from pigeon.protocol.wire import PROBLEM_JSON, canonical_json
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
