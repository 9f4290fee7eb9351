"""What one reply means for the operation that was sent (docs/design.md, "Sync").

Pure code: a reply (status, headers, body) or the exception that stood in for one goes in,
an `ReplyOutcome` comes out. The executor turns outcomes into queue transitions; nothing here
touches the network, the queue or the clock (``now`` is passed in for HTTP dates).
"""

from __future__ import annotations

import datetime
import email.utils
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from pigeon.core import wire
from pigeon.exceptions import (
    AuthorizationRequired,
    BatchRefused,
    ConflictError,
    DeliveryError,
    KeyInProgress,
    NotSent,
    PermanentError,
    RetryableError,
)

FailureKind = Literal["transient", "permanent", "conflict"]


class ReplyKind(enum.StrEnum):
    DELIVERED = "delivered"  # 2xx: done, never send again
    TRANSIENT = "transient"  # may succeed later with the SAME key; spends an attempt
    KEY_IN_PROGRESS = "key_in_progress"  # 409: the server is still running this key
    CONFLICT = "conflict"  # stale base version: hold for the conflict resolver
    AUTH = "auth"  # 401/403: pause the whole queue, spend nothing
    # A batch request refused as a whole (transport.BatchRefused): none applied, or a
    # redirect (3xx) of any request, or a request URL that cannot be used (no http(s)://,
    # sent=False); the same request will be refused again: pause the whole queue, spend
    # nothing.
    REFUSED = "refused"
    PERMANENT = "permanent"  # will never succeed: dead-letter


# Exceptions raised before a single byte of the request left this process: the server
# cannot have seen it, so it is not an attempt, it is a sign that the server is unreachable.
_NOT_SENT: tuple[type[BaseException], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    # The proxy refused the tunnel (CONNECT) or the SOCKS handshake: raised only before
    # the request itself is written (a captive portal, a proxy's policy).
    httpx.ProxyError,
)
# The request URL cannot be used at all (no http:// or https://, not a URL): raised before
# anything is sent, for every operation alike. It is the client's configuration (a base
# URL or a client without one), not the operation's fault: the queue pauses with the
# reason, spending no attempt, rather than dead-letter every operation on its first try.
# (HttpTransport tells apart an operation whose own endpoint is the bad URL, its base URL
# being sound: it answers that one with a PermanentError, so one bad operation cannot
# pause the queue again after every resume.)
_BAD_URL: tuple[type[BaseException], ...] = (httpx.UnsupportedProtocol, httpx.InvalidURL)
# This request cannot be formed (e.g. a header value h11 refuses); sending it again
# cannot help.
_MALFORMED: tuple[type[BaseException], ...] = (httpx.LocalProtocolError,)
# RFC 9457: "about:blank" is the type of a problem with no semantics beyond its status.
_UNTYPED = "about:blank"


@dataclass(frozen=True, slots=True)
class ReplyOutcome:
    kind: ReplyKind
    reason: str
    status: int | None = None
    retry_after: float | None = None  # seconds the server asked us to wait, if any
    sent: bool = True  # False: the request never left; the server cannot have seen it
    etag: str | None = None  # unquoted entity version from a 2xx reply
    body: Any = None

    @property
    def failure_kind(self) -> FailureKind:
        """The `kind` argument of ``OfflineQueue.mark_failed`` for this outcome."""
        if self.kind in (ReplyKind.TRANSIENT, ReplyKind.KEY_IN_PROGRESS):
            return "transient"
        if self.kind is ReplyKind.CONFLICT:
            return "conflict"
        if self.kind is ReplyKind.PERMANENT:
            return "permanent"
        raise ValueError(f"outcome {self.kind} is not a failure")

    def error(self) -> DeliveryError:
        """The typed exception of pigeon.exceptions that names this outcome."""
        cls: type[DeliveryError] = {
            ReplyKind.TRANSIENT: RetryableError,
            ReplyKind.KEY_IN_PROGRESS: KeyInProgress,
            ReplyKind.CONFLICT: ConflictError,
            ReplyKind.AUTH: AuthorizationRequired,
            ReplyKind.PERMANENT: PermanentError,
        }.get(self.kind, DeliveryError)
        return cls(self.reason, status=self.status, retry_after=self.retry_after, body=self.body)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup that works on plain dicts as well as httpx.Headers."""
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    value = headers.get(lowered)  # a batch result's headers: lower-case, as HTTP/2 sends them
    if value is not None:
        return value
    for key, candidate in headers.items():
        if key.lower() == lowered:
            return candidate
    return None


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay-seconds or HTTP-date).

    Returns None for a missing or unreadable value (the retry policy then decides alone),
    and never a negative number: a date in the past means "now".
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # asctime (and "-0000") parse without a zone; RFC 9110 5.6.7: every HTTP-date is
        # GMT. Read as local time, or refused, a server's date would be hours off or lost.
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def problem_type(body: Any) -> str | None:
    if isinstance(body, Mapping):
        kind = body.get("type")
        return kind if isinstance(kind, str) else None
    return None


def delivers(status: int | None, error: BaseException | None) -> bool:
    """The reply delivered its operation (``classify`` answers ``DELIVERED``): a 2xx and no
    error. Asked on its own for each operation of a batch, where making the outcome to read
    the same answer cost more than the rule."""
    return error is None and status is not None and 200 <= status < 300


def version_of(headers: Mapping[str, str]) -> str | None:
    """The entity version a delivering reply's ETag names, unquoted; None without one.
    ETag: "" is valid HTTP but names no version: no If-Match can be built on it."""
    etag = header(headers, wire.ETAG)
    return (wire.unquote_etag(etag) if etag else "") or None


def delivered_outcome(status: int, version: str | None, body: Any) -> ReplyOutcome:
    """``classify``'s outcome for a reply that ``delivers``, its ETag read (``version_of``)."""
    return ReplyOutcome(
        ReplyKind.DELIVERED, f"HTTP {status}", status=status, etag=version, body=body
    )


def classify(
    status: int | None,
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    error: BaseException | None = None,
    *,
    now: float,
) -> ReplyOutcome:
    """Classify one reply, or the exception raised instead of one."""
    if delivers(status, error):
        assert status is not None
        return delivered_outcome(status, version_of(headers or {}), body)
    if error is not None:
        return _classify_error(error)
    if status is None:
        return ReplyOutcome(ReplyKind.TRANSIENT, "no reply and no error", sent=True)
    headers = headers or {}
    retry_after = parse_retry_after(header(headers, wire.RETRY_AFTER), now=now)
    if status in wire.TRANSIENT_4XX or 500 <= status < 600:
        return ReplyOutcome(
            ReplyKind.TRANSIENT,
            f"HTTP {status}",
            status=status,
            retry_after=retry_after,
            body=body,
        )
    if status in wire.AUTH_STATUSES:
        return ReplyOutcome(
            ReplyKind.AUTH, f"HTTP {status}: authorisation needed", status=status, body=body
        )
    if status == 409:
        kind = problem_type(body)
        # Retry-After breaks the tie only for a 409 that names no type (see wire): an
        # app's own 409 ("duplicate title") may carry one too, and reading it as "key in
        # progress" would resend it forever, never spending an attempt, never resolved.
        untyped = kind is None or kind == _UNTYPED
        in_progress = kind == wire.PROBLEM_KEY_IN_PROGRESS or (untyped and retry_after is not None)
        if in_progress:
            return ReplyOutcome(
                ReplyKind.KEY_IN_PROGRESS,
                "HTTP 409: the server is still processing this key",
                status=status,
                retry_after=retry_after,
                body=body,
            )
        named = None if untyped or kind == wire.PROBLEM_VERSION_CONFLICT else kind
        reason = f"HTTP 409: {named or 'version conflict'}"
        return ReplyOutcome(ReplyKind.CONFLICT, reason, status=status, body=body)
    if status == 412:
        return ReplyOutcome(
            ReplyKind.CONFLICT, "HTTP 412: base version is stale", status=status, body=body
        )
    if 300 <= status < 400:
        # A redirect answers the endpoint, not the operation: a base URL on http behind
        # an https redirect, a moved API. Every operation would get it, so dead-lettering
        # each (as a 4xx) fills the dead letters with work that was never refused; like
        # a batch refused as a whole, it pauses the queue until the configuration is
        # fixed. (httpx does not follow redirects: a 301/302/303 would resend a write as
        # a GET.)
        location = header(headers, "location")
        reason = f"HTTP {status}: the server redirects this request" + (
            f" to {location}" if location else ""
        )
        reason += "; check the transport's base URL and endpoints, then resume"
        return ReplyOutcome(ReplyKind.REFUSED, reason, status=status, body=body)
    # 4xx not handled above, and anything outside 2xx-5xx: sending the same request
    # again cannot change the answer.
    detail = _problem_detail(body)
    reason = f"HTTP {status}" + (f": {detail}" if detail else "")
    return ReplyOutcome(ReplyKind.PERMANENT, reason, status=status, body=body)


def _problem_detail(body: Any) -> str | None:
    if isinstance(body, Mapping):
        for key in ("detail", "title", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def _classify_error(error: BaseException) -> ReplyOutcome:
    name = f"{type(error).__name__}: {error}"
    if isinstance(error, NotSent):  # before DeliveryError: it is a RetryableError too
        return ReplyOutcome(ReplyKind.TRANSIENT, name, sent=False)
    if isinstance(error, DeliveryError):
        if isinstance(error, BatchRefused):
            kind = ReplyKind.REFUSED
        elif isinstance(error, KeyInProgress):
            kind = ReplyKind.KEY_IN_PROGRESS
        elif isinstance(error, RetryableError):
            kind = ReplyKind.TRANSIENT
        elif isinstance(error, ConflictError):
            kind = ReplyKind.CONFLICT
        elif isinstance(error, AuthorizationRequired):
            kind = ReplyKind.AUTH
        elif isinstance(error, PermanentError):
            kind = ReplyKind.PERMANENT
        else:  # UnknownOutcome and the bare base: it may have happened; same key again
            kind = ReplyKind.TRANSIENT
        return ReplyOutcome(
            kind, name, status=error.status, retry_after=error.retry_after, body=error.body
        )
    if isinstance(error, _NOT_SENT):
        return ReplyOutcome(ReplyKind.TRANSIENT, name, sent=False)
    if isinstance(error, _BAD_URL):
        reason = f"{name}; check the transport's base URL (http:// or https://), then resume"
        return ReplyOutcome(ReplyKind.REFUSED, reason, sent=False)
    if isinstance(error, _MALFORMED):
        return ReplyOutcome(ReplyKind.PERMANENT, name)
    # Read/write errors, timeouts after the request went out, OSError: the server may or
    # may not have the request. The same key makes sending it again safe.
    return ReplyOutcome(ReplyKind.TRANSIENT, name)
