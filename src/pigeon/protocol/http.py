"""`HttpTransport`: the edge speaking the wire protocol over httpx.

Two modes. Single-operation mode sends each operation with its own method and path, so
any HTTP API that honours ``Idempotency-Key`` can be the server. Batch mode POSTs
``/pigeon/v1/batch`` (see `pigeon.core.wire`) and costs the server one commit per
batch. In both modes the operation's idempotency key goes out unchanged on every attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

import httpx

from pigeon.checks import is_int_in
from pigeon.core import wire
from pigeon.core.operation import Operation, OpType
from pigeon.exceptions import (
    BatchRefused,
    ConfigurationError,
    NotSent,
    PermanentError,
    UnknownOutcome,
)
from pigeon.protocol.transport import Exchange, KeepGoing, Reply

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)
MAX_CONCURRENCY = 64
PROBE_TIMEOUT = httpx.Timeout(2.0)

_DEFAULT_METHODS: dict[str, str] = {
    OpType.CREATE: "POST",
    OpType.UPDATE: "PUT",
    OpType.DELETE: "DELETE",
}

HeaderSource = Mapping[str, str] | Callable[[], Mapping[str, str]]
TokenSource = str | Callable[[], str]
Route = Callable[[Operation], tuple[str, str]]
Answered = list[tuple[Operation, Reply]]
Item = TypeVar("Item", Operation, Sequence[Operation])


def default_route(op: Operation) -> tuple[str, str]:
    """(method, path) of an operation: its own, or POST/PUT/DELETE by type."""
    if not op.endpoint:
        raise PermanentError(
            f"operation {op.id} ({op.type} {op.entity}) has no endpoint to send it to"
        )
    method = op.method or _DEFAULT_METHODS.get(op.type, "POST")
    return method.upper(), op.endpoint


class HttpTransport:
    """Send operations to ``base_url``.

    ``timeout`` is an httpx.Timeout (set ``connect`` and ``read`` separately) or seconds.
    ``token`` (a string, or a callable asked before every request so refreshed tokens are
    picked up) becomes ``Authorization: Bearer``; ``headers`` adds any other headers, also
    as a mapping or a callable. ``batch=True`` uses the batch endpoint with every operation
    the engine hands over in one request; ``batch=N`` splits them into requests of at most
    N. ``client`` replaces the httpx.Client built here (its base_url is then used as is).
    A base URL (``base_url``, or the client's when it has one) that is not an absolute
    http:// or https:// URL with a host raises `ConfigurationError` here: every request
    would fail before leaving this process. (Should a request URL still be unusable at
    send time, the queue pauses with the reason; see `pigeon.sync.classify`.)
    A batch request refused as a whole is not a verdict on its operations: 413 (too large,
    often a proxy's limit) splits it in halves, sent one after the other, down to single
    operations (one still too large alone is a permanent error); 401/403/408/425/429/5xx
    are every operation's answer; any other refusal is `BatchRefused`, which pauses the
    queue (see ``SyncEngine.resume``).

    ``concurrency`` > 1 keeps up to that many requests (single operations, or batch chunks)
    on the wire at once instead of waiting for each reply before the next request. The
    operations the engine hands over together are on distinct entities (at most one in
    flight per entity), so per-entity order still holds; what is given up is the order in
    which *different* entities reach the server, which no failure-free guarantee promised
    anyway (a failing entity is always overtaken by the others). The token and header
    callables are then called from the transport's threads.
    """

    def __init__(
        self,
        base_url: str = "",
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        token: TokenSource | None = None,
        headers: HeaderSource | None = None,
        batch: bool | int = False,
        route: Route = default_route,
        client: httpx.Client | None = None,
        concurrency: int = 1,
    ) -> None:
        if not is_int_in(concurrency, 1, MAX_CONCURRENCY):
            raise ConfigurationError(
                f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, not {concurrency!r}"
            )
        if batch is not True and batch is not False and not is_int_in(batch, 1):
            raise ConfigurationError(f"batch must be True, False or a size >= 1, not {batch!r}")
        if client is None and not base_url:
            raise ConfigurationError("HttpTransport needs a base_url (or a client)")
        if base_url:
            _check_base_url(base_url, "base_url")
        if client is not None and str(client.base_url):
            # A client without a base_url is left alone: its routes may give whole URLs.
            _check_base_url(client.base_url, "the client's base_url")
        self.per_request: int | None = None if batch is False else (0 if batch is True else batch)
        self._token = token
        self._headers = headers
        self._route = route
        self._owns_client = client is None
        self.client = client or httpx.Client(base_url=base_url, timeout=timeout)
        self.concurrency = concurrency
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def batched(self) -> bool:
        return self.per_request is not None

    def send(
        self, operations: Sequence[Operation], *, keep_going: KeepGoing | None = None
    ) -> Exchange:
        """Send in order; stop early (leaving the rest unattempted) when `keep_going` says so.

        The executor passes a `keep_going` that stops at "authorisation needed" and at
        "server unreachable", so one dead connection costs one request, not a hundred.
        """
        keep = keep_going or (lambda _reply: True)
        if not operations:  # nothing to send; batch mode would cut it in chunks of 0
            return Exchange()
        if self.client.is_closed:
            # httpx raises RuntimeError, which read as "may have been sent" left every
            # operation marked sent (never folded into or cancelled again). Nothing was.
            closed = Reply(error=NotSent("the transport is closed; nothing was sent"), shared=True)
            return Exchange([(op, closed) for op in operations])
        if self.per_request is None:
            return self._run(
                list(operations),
                lambda op: [(op, self._send_one(op))],
                lambda _op, answered: not keep(answered[0][1]),
            )
        size = min(self.per_request or len(operations), wire.MAX_BATCH)
        chunks = [operations[i : i + size] for i in range(0, len(operations), size)]
        return self._run(
            chunks,
            lambda chunk: self._send_batch(chunk, keep),
            lambda chunk, answered: _stopped(chunk, answered, keep),
        )

    def _run(
        self,
        items: Sequence[Item],
        call: Callable[[Item], Answered],
        stop: Callable[[Item, Answered], bool],
    ) -> Exchange:
        """``call`` each item in order, at most ``concurrency`` at once, starting the next
        as soon as any finishes; once an answer says ``stop``, start no more. Answers are
        kept in item order, including those of items already on the wire when the stop
        came: they were sent."""
        exchange = Exchange()
        if self.concurrency == 1 or len(items) <= 1:
            for item in items:
                exchange.transmitted |= _ids(item)
                answered = call(item)
                exchange.replies.extend(answered)
                if stop(item, answered):
                    break
            return exchange
        with self._pool_lock:  # lanes of a pipelined engine send at once: one pool
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pigeon-http")
            pool = self._pool
        started: list[Future[Answered]] = []
        on_the_wire: dict[Future[Answered], Item] = {}
        stopped = False
        while True:
            while not stopped and len(started) < len(items) and len(on_the_wire) < self.concurrency:
                item = items[len(started)]
                exchange.transmitted |= _ids(item)
                future = pool.submit(call, item)
                started.append(future)
                on_the_wire[future] = item
            if not on_the_wire:
                break
            finished, _ = wait(on_the_wire, return_when=FIRST_COMPLETED)
            for future in finished:
                item = on_the_wire.pop(future)
                stopped = stopped or stop(item, future.result())
        for future in started:
            exchange.replies.extend(future.result())
        return exchange

    def probe(self) -> bool:
        """Whether the server answers at all. Any HTTP status counts, 5xx included: it
        proves the network path, which is all a connectivity monitor is for. A sick
        server (a gateway's 502/503/504, a 500) is the executor's business: transient,
        backoff with the same key, Retry-After honoured. Read as "offline", a health
        route that answers 5xx (or a server without one, behind such a gateway) kept the
        engine's background loop idle for as long as it did, though writes went through."""
        try:
            self.client.get(wire.HEALTH_PATH, timeout=PROBE_TIMEOUT)
        except (httpx.HTTPError, OSError):
            return False
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> HttpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _common_headers(self) -> httpx.Headers:
        # httpx.Headers, not a dict: names are case-insensitive, so the token's
        # Authorization and each operation's Idempotency-Key replace an app's own
        # "authorization" or "idempotency-key" instead of going out as a second line.
        headers = httpx.Headers()
        if self._headers is not None:
            headers.update(self._headers() if callable(self._headers) else self._headers)
        if self._token is not None:
            token = self._token() if callable(self._token) else self._token
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _send_one(self, op: Operation) -> Reply:
        try:
            method, path = self._route(op)
        except PermanentError as exc:
            return Reply(error=exc)
        try:
            headers = self._common_headers()
        except Exception as exc:
            return Reply(error=_not_sent(exc))
        headers[wire.IDEMPOTENCY_KEY] = op.idempotency_key
        if op.clock:
            headers[wire.CLOCK] = op.clock
        if op.base_version is not None:
            headers[wire.IF_MATCH] = wire.quote_etag(op.base_version)
        try:
            if op.payload is None:
                response = self.client.request(method, path, headers=headers)
            else:
                response = self.client.request(method, path, headers=headers, json=op.payload)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            if not _is_base_url(self.client.base_url):
                return Reply(error=exc)  # the configuration's fault: the queue pauses
            # The base URL is sound, so this operation's own endpoint (a whole URL that
            # overrides it, or not a URL at all) is what cannot be sent, now or ever.
            error = PermanentError(
                f"operation {op.id} ({op.type} {op.entity}): its endpoint {path!r} cannot "
                f"be sent: {type(exc).__name__}: {exc}"
            )
            return Reply(error=error)
        except (httpx.HTTPError, OSError) as exc:
            return Reply(error=exc)
        return Reply(
            status=response.status_code,
            headers=response.headers,
            body=_body(response),
            replayed=response.headers.get(wire.REPLAYED, "").lower() == "true",
        )

    def _send_batch(self, chunk: Sequence[Operation], keep: KeepGoing) -> Answered:
        try:
            headers = self._common_headers()
        except Exception as exc:
            return _all(chunk, Reply(error=_not_sent(exc), shared=True))
        try:
            response = self.client.post(
                wire.BATCH_PATH,
                headers=headers,
                json={"operations": [op.to_wire() for op in chunk]},
            )
        except (httpx.HTTPError, OSError) as exc:
            return _all(chunk, Reply(error=exc, shared=True))
        body = _body(response)
        status = response.status_code
        if not 200 <= status < 300:
            if status in _BATCH_STATUSES_PER_OPERATION or 500 <= status < 600:
                # Authorisation and transient answers mean the same for every operation.
                return _all(chunk, Reply(status, response.headers, body, shared=True))
            if status == 413:  # too large, none applied: smaller requests may pass
                return self._split(chunk, keep, body)
            # Any other refusal of the batch request itself (404/405 no batch route, 400
            # a batch it cannot read) says nothing about the operations in it: none was
            # applied. Retrying spends attempts and ends in the dead letters; it pauses
            # the queue instead, with the reason, until someone fixes the server or the
            # client's configuration (see BatchRefused).
            refused = BatchRefused(
                f"HTTP {status}: the server refused the batch request ({wire.BATCH_PATH}) "
                "as a whole; none of its operations was applied. Check that it serves "
                "pigeon's batch route (or use HttpTransport(batch=False)), then resume",
                status=status,
                body=body,
            )
            return _all(chunk, Reply(error=refused, shared=True))
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list):
            error = UnknownOutcome(
                f"batch reply HTTP {response.status_code} has no 'results' list",
                status=response.status_code,
                body=body,
            )
            return _all(chunk, Reply(error=error, shared=True))
        by_id = {r.get("id"): r for r in results if isinstance(r, dict)}
        answered: list[tuple[Operation, Reply]] = []
        for op in chunk:
            result = by_id.get(op.id)
            if result is None:
                continue  # the server stopped before this one: not attempted
            answered.append((op, _result_reply(result)))
        if not answered:
            # A server that stops at a failure still answers that operation: none
            # answered is a reply that says nothing (results for other ids, a proxy's
            # cached page). Read as "none attempted", they were due again at once and
            # resent in a tight loop; an unknown outcome is a backoff with the same keys.
            error = UnknownOutcome(
                f"batch reply HTTP {status} answered none of its {len(chunk)} operations",
                status=status,
                body=body,
            )
            return _all(chunk, Reply(error=error, shared=True))
        return answered

    def _split(self, chunk: Sequence[Operation], keep: KeepGoing, body: Any) -> Answered:
        """413 for a batch request: send its halves, one after the other, in order. Each
        request is a fresh look at the limit (payload sizes differ, a count learned from
        one batch would not fit the next); the cost is one refused request per halving."""
        if len(chunk) == 1:
            # Too large on its own: no request will ever carry it past this limit.
            error = PermanentError(
                "HTTP 413: this operation alone is too large for the server (or a proxy "
                "before it) in a batch request",
                status=413,
                body=body,
            )
            return [(chunk[0], Reply(error=error))]
        middle = len(chunk) // 2
        first = self._send_batch(chunk[:middle], keep)
        if _stopped(chunk[:middle], first, keep):
            return first  # the second half is not attempted, as after a short reply
        return first + self._send_batch(chunk[middle:], keep)


def _ids(item: Operation | Sequence[Operation]) -> set[str]:
    """The ids of the operations one request carries (one, or a batch's chunk)."""
    return {item.id} if isinstance(item, Operation) else {op.id for op in item}


def _is_base_url(url: httpx.URL) -> bool:
    return url.scheme in ("http", "https") and bool(url.host)


def _check_base_url(value: str | httpx.URL, name: str) -> None:
    """Raise `ConfigurationError` unless ``value`` is an http(s) URL with a host."""
    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"{name} {str(value)!r} is not a URL: {exc}") from exc
    if not _is_base_url(url):
        raise ConfigurationError(
            f"{name} {str(value)!r} is not an http:// or https:// URL with a host "
            "(such as 'https://api.example')"
        )


def _stopped(chunk: Sequence[Operation], answered: Answered, keep: KeepGoing) -> bool:
    """Whether sending must stop after ``chunk``'s answers: the server stopped short of
    its end (a transient failure), or an answer says stop (`Transport.send`)."""
    return len(answered) < len(chunk) or not all(keep(reply) for _, reply in answered)


# Batch-level statuses that mean the same thing for each operation inside (plus 5xx).
_BATCH_STATUSES_PER_OPERATION = frozenset({401, 403, 408, 425, 429})


def _not_sent(exc: Exception) -> NotSent:
    """The token or header callable raised (a token refresh that could not reach its
    server, an app bug): application code, so any exception. Nothing was sent, so this is
    not an attempt of the operations, and it must not escape into the engine's loop."""
    error = NotSent(f"request headers could not be made: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _all(chunk: Sequence[Operation], reply: Reply) -> list[tuple[Operation, Reply]]:
    return [(op, reply) for op in chunk]


def _result_reply(result: Mapping[str, Any]) -> Reply:
    status = result.get("status")
    headers = result.get("headers")
    if not isinstance(status, int):
        error = UnknownOutcome(f"batch result for {result.get('id')} has no status", body=result)
        return Reply(error=error)
    return Reply(
        status=status,
        headers={str(k): str(v) for k, v in headers.items()} if isinstance(headers, dict) else {},
        body=result.get("body"),
        replayed=bool(result.get("replayed", False)),
    )


def _body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    if "json" in response.headers.get("content-type", ""):
        try:
            return response.json()
        except ValueError:
            pass
    return response.text
