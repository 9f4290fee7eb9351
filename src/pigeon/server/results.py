"""What one operation answers: an ``OpResult``, the problem+json refusals, when the store
is down the fail-closed 503, and the 500 of a failure (`server_error`): no 5xx body holds
an exception's text, each holds an error id that its log line holds too."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pigeon.core.wire import AUTH_STATUSES, PROBLEM_JSON, TRANSIENT_4XX, canonical_json
from pigeon.logs import failure
from pigeon.server.identifiers import header_value
from pigeon.server.problems import problem
from pigeon.storage.base import Tx
from pigeon.storage.errors import CONTENTION_RETRIES, contended

log = logging.getLogger(__name__)


# 4xx answers that mean "not now" rather than "no": the client sends the same key again
# (408, 425 and 429 are transient in docs/design.md's classification; on 401/403 the queue
# pauses until the user is signed in again, then resumes). Stored, such an answer would be
# replayed to every retry and the operation could never run, so, like a 5xx, it releases
# the key and nothing is kept.
NOT_STORED_4XX = TRANSIENT_4XX | AUTH_STATUSES


def stored(status: int) -> bool:
    """Is an answer with this status, once the handler ran, the key's final answer?"""
    return status < 500 and status not in NOT_STORED_4XX


@dataclass(slots=True)  # not frozen, and why: pigeon.server.operations
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


def new_error_id() -> str:
    """An id for one failure, given in the 5xx answer and in its log line."""
    return secrets.token_hex(8)


def server_error(
    slug: str,
    what: str,
    exc: BaseException,
    logger: logging.Logger,
    msg: str,
    *args: object,
) -> OpResult:
    """The 500 answering ``exc``: ``what`` failed, in general terms, and an error id, which
    the log line (``msg``, the exception's type and traceback) carries too. Never the
    exception's text: a handler's may quote the request, a driver's the data or schema."""
    error_id = new_error_id()
    failure(logger, msg, *args, exc=exc, error_id=error_id)
    detail = f"{what}; the server's log has it under error id {error_id}"
    return problem_result(500, slug, "Internal error", detail, error_id=error_id)


def store_unavailable(exc: BaseException) -> OpResult:
    """Fail closed: without the store there is no dedup, so nothing may run."""
    error_id = new_error_id()
    log.warning(
        "idempotency store unavailable [error %s]: %s", error_id, exc, extra={"error_id": error_id}
    )
    if contended(exc):  # still a deadlock victim after CONTENTION_RETRIES runs
        detail = (
            "the database aborted the transaction to break a deadlock or serialization "
            f"conflict, {CONTENTION_RETRIES + 1} times; nothing was executed"
        )
    else:
        detail = "the idempotency store cannot be reached; nothing was executed"
    detail += f" (error id {error_id})"
    result = problem_result(
        503, "store-unavailable", "Service unavailable", detail, error_id=error_id
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


def normalise(out: tuple[Any, ...]) -> tuple[int, Any, tuple[tuple[str, str], ...]]:
    """A handler's ``(status, body)`` or ``(status, body, headers)``, headers lower-cased."""
    if len(out) == 2:
        status, body = out
        headers: Mapping[str, str] = {}
    else:
        status, body, headers = out
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise TypeError(f"a handler must return an HTTP status, not {status!r}")
    kept: list[tuple[str, str]] = []
    for name, value in headers.items():
        lower = _NAMES.get(name) if type(name) is str else None
        if lower is None:
            lower = _header_name(name)
        # Values encoded now, before they are stored: a stored header is replayed on every
        # retry, and one that cannot be sent (a non-ASCII Location) failed each of them.
        kept.append((lower, header_value(str(value))))
    return status, body, tuple(kept)


def _header_name(name: object) -> str:
    """``name`` lower-cased, or TypeError raised in the handler's savepoint (nothing
    commits, rather than a write that commits and then cannot be answered)."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise TypeError(f"a handler returned a header name that is no HTTP token: {name!r}")
    if len(_NAMES) < _NAMES_KEPT:
        _NAMES[name] = name.lower()
    return name.lower()


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Header names found to be tokens, lower-cased: a handler answers with the same few names
# every time, and checking each again cost a batch ~1 us an operation. Bounded: names are
# the application's, but a handler could make them up.
_NAMES: dict[str, str] = {}
_NAMES_KEPT = 256
