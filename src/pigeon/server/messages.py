"""The wire's side of the ASGI app: a request read into an ``OperationRequest`` (or the
400/413 refusing it, before anything runs), and an ``OpResult`` rendered as a response.
No routing and no intake here: ``pigeon.server.app`` puts these around an ``Intake``;
``pigeon.server.middleware`` uses the same decoder and renderer, and
``pigeon.server.batch_wire`` the same checks for a batch's entries.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pigeon.core import strictjson
from pigeon.core.clock import HLCTimestamp
from pigeon.core.printable import printable
from pigeon.core.strictjson import JsonRefused
from pigeon.core.wire import CLOCK, IDEMPOTENCY_KEY, IF_MATCH, unquote_etag
from pigeon.server import contract
from pigeon.server.contract import (
    MAX_CLOCK_COUNTER,
    MAX_CLOCK_LENGTH,
    MAX_CLOCK_WALL_MS,
    MAX_NODE_LENGTH,
    OPERATION_ID,
)
from pigeon.server.fingerprint import InvalidIdempotencyKey, validate_key
from pigeon.server.identifiers import (
    MAX_ETAG_LENGTH,
    MAX_OPERATION_ID_LENGTH,
    InvalidIdentifier,
    header_value,
    loggable,
    optional_token,
)
from pigeon.server.intake import OperationRequest
from pigeon.server.limits import DEFAULT_MAX_BODY, declared_too_large, read_buffer, too_large
from pigeon.server.results import OpResult, problem_result, server_error
from pigeon.server.testhooks import BadTestHook, TestHooks

log = logging.getLogger(__name__)
# Bodies up to this many bytes are decoded on the event loop (a thread hand-off costs
# more than their decoding); a larger one in a worker thread, so that no request's
# decoding holds up every other connection (a 2 MiB body takes tens of milliseconds).
INLINE_JSON_BYTES = 64 << 10


def bad_json(what: str, exc: JsonRefused) -> OpResult:
    """The 400 refusing a body the strict decoder refused, naming the problem."""
    return problem_result(
        400,
        "bad-json",
        "Bad request",
        f"{what} is not JSON pigeon takes: {exc}",
        json_error=exc.problem,
    )


async def decode_body(raw: bytes | bytearray, what: str) -> Any:
    """The body's JSON value (None for an empty body), or the ``OpResult`` refusing it."""
    if not raw.strip():
        return None
    if len(raw) <= INLINE_JSON_BYTES:
        value = _decode(raw)
    else:
        value = await run_in_threadpool(_decode, raw)
    return bad_json(what, value) if isinstance(value, JsonRefused) else value


def is_json_media(content_type: str) -> bool:
    """Is ``content_type`` JSON, the one thing a write's body may be? ``application/json``
    or any ``+json`` type (``application/merge-patch+json``), with parameters; a charset,
    if one is named, only UTF-8 (RFC 8259: JSON is UTF-8)."""
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    if media != "application/json" and not (media.endswith("+json") and "/" in media):
        return False
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            return False
    return True


def unsupported_media(content_type: str | None, body: bytes | bytearray | None) -> OpResult | None:
    """The 415 refusing a write's body that is not declared JSON (``is_json_media``): a
    Content-Type of anything else, or a body without one (``body``: None while it is not
    read yet; an empty body needs no type). Before the claim: nothing runs, nothing kept."""
    if content_type is None and (body is None or not body.strip()):
        return None
    if content_type is not None and is_json_media(content_type):
        return None
    shown = "no Content-Type" if content_type is None else f"Content-Type {content_type[:80]!r}"
    return problem_result(
        415,
        "unsupported-media-type",
        "Unsupported media type",
        f"a write's body is JSON, sent as application/json (or a +json type); not {shown}",
    )


def refused_unread(
    content_type: str | None, declared: str | None, limit: int, what: str
) -> OpResult | None:
    """What refuses a write's body from the request's head alone, in the one order every
    route answers in (``pigeon serve``'s, the integrations'): a declared type that is not
    JSON (415), then a Content-Length (``declared``) over ``limit`` (413)."""
    return unsupported_media(content_type, None) or declared_too_large(declared, limit, what)


async def read_json_buffer(request: Request, limit: int, what: str) -> bytearray | OpResult:
    """A write's body in one buffer (``read_buffer``), or its refusal, before anything runs:
    ``refused_unread``, then the limit counted as the body arrives, then a body that came
    without a type (415)."""
    media = request.headers.get("content-type")
    raw = unsupported_media(media, None) or await read_buffer(request, limit, what)
    if isinstance(raw, OpResult):
        return raw
    return unsupported_media(media, raw) or raw


def render_result(result: OpResult) -> Response:
    # Encoded again here, not only when stored: a response stored before header values
    # were encoded must still replay, not answer 500 on every retry.
    headers = {name: header_value(value) for name, value in result.headers}
    media_type = headers.pop("content-type", "application/json")
    if result.status == 204 or not result.body_text:
        return Response(status_code=result.status, headers=headers)
    return Response(result.body_text, result.status, headers=headers, media_type=media_type)


def bad_request(slug: str, detail: str) -> OpResult:
    return problem_result(400, slug, "Bad request", detail)


# A stamp as clocks write it (ASCII digits, a node of visible ASCII), taken at a glance:
# the checks below cost three times as much; they run for any other, to word its refusal.
_PLAIN_STAMP = re.compile(rf"([0-9]{{1,15}})-[0-9]{{1,10}}-[ -~]{{0,{MAX_NODE_LENGTH}}}")


def read_clock(value: object) -> str | OpResult:
    if value is None or value == "":
        return ""
    plain = _PLAIN_STAMP.fullmatch(value) if type(value) is str else None
    if plain is not None and int(plain[1]) <= MAX_CLOCK_WALL_MS:
        return plain.string  # the value itself
    try:
        if not isinstance(value, str):
            raise ValueError(f"a clock stamp is a string, not {type(value).__name__}")
        if len(value) > MAX_CLOCK_LENGTH:
            raise ValueError(f"a clock stamp has at most {MAX_CLOCK_LENGTH} characters")
        wall, _, rest = value.partition("-")
        counter = rest.partition("-")[0]
        if not all(part.isascii() and part.isdigit() for part in (wall, counter)):
            raise ValueError(f"a clock stamp is <digits>-<digits>-<node>, not {value!r}")
        stamp = HLCTimestamp.decode(value)
        if stamp.wall_ms > MAX_CLOCK_WALL_MS or stamp.counter > MAX_CLOCK_COUNTER:
            raise ValueError(
                f"a clock stamp's wall is at most {MAX_CLOCK_WALL_MS} ms (the end of year "
                f"9999) and its counter at most {MAX_CLOCK_COUNTER}: {value!r}"
            )
        if not printable(stamp.node) or len(stamp.node) > MAX_NODE_LENGTH:
            raise ValueError(
                f"a clock stamp's node is at most {MAX_NODE_LENGTH} printable characters"
            )
    except ValueError as exc:
        return bad_request("bad-clock", f"{CLOCK}: {exc}")
    return value


def route_path(scope: Scope) -> str:
    """The path as the router matched it: percent-decoded (``request.url.path`` escapes
    ``?``, ``#`` and ``\\`` again, so an id holding one named another entity than in a
    batch) and without the prefix of a ``Mount`` the app is served under (its
    ``root_path``), which the intake's templates do not have."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :] or "/"
    return path


async def parse_request(
    request: Request, *, max_body: int = DEFAULT_MAX_BODY, test_hooks: bool = False
) -> OperationRequest | OpResult:
    """A single-operation request, or the 400 (413 for a body over ``max_body`` bytes)
    that refuses it (before anything runs). ``test_hooks``: read the fault switch's
    headers (`pigeon.server.testhooks`)."""
    read = await read_request(request, max_body=max_body, test_hooks=test_hooks)
    return read if isinstance(read, OpResult) else read[1]


async def read_request(
    request: Request, *, max_body: int = DEFAULT_MAX_BODY, test_hooks: bool = False
) -> tuple[bytearray, OperationRequest] | OpResult:
    """``parse_request``, with the body's bytes as they came (for a framework that reads
    them after pigeon has)."""
    head = _head(request.headers, test_hooks)
    if isinstance(head, OpResult):
        return head
    raw = await read_json_buffer(request, max_body, "one operation's request")
    if isinstance(raw, OpResult):
        return raw
    body = await decode_body(raw, "the request body")
    if isinstance(body, OpResult):
        return body
    path = route_path(request.scope)  # already through PathCheck (create_app's)
    op = _operation(request.method, path, request.headers, head, body)
    return op if isinstance(op, OpResult) else (raw, op)


def head_refusal(headers: Headers, test_hooks: bool = False) -> OpResult | None:
    """What refuses a single operation from its key and test hooks alone: the first of
    its refusals, before its body's (``parse_request``'s order)."""
    head = _head(headers, test_hooks)
    return head if isinstance(head, OpResult) else None


def parse_operation(
    method: str,
    path: str,
    headers: Headers,
    raw: bytes,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    test_hooks: bool = False,
) -> OperationRequest | OpResult:
    """``parse_request`` of a request whose body its framework has read already (a
    Django view's): the same refusals, in the same order. ``path``: percent-decoded."""
    head = _head(headers, test_hooks)
    if isinstance(head, OpResult):
        return head
    media = headers.get("content-type")
    refused = unsupported_media(media, None)
    if refused is None and len(raw) > max_body:
        refused = too_large("one operation's request", max_body, f"it has {len(raw)} bytes")
    refused = refused or unsupported_media(media, raw)
    if refused is not None:
        return refused
    body: Any = None
    if raw.strip():
        decoded = _decode(raw)
        if isinstance(decoded, JsonRefused):
            return bad_json("the request body", decoded)
        body = decoded
    return _operation(method, path, headers, head, body)


def _head(headers: Headers, test_hooks: bool) -> tuple[str, TestHooks | None] | OpResult:
    """The request's key and test hooks, read before its body, or the 400 refusing them."""
    try:
        key = validate_key(headers.getlist(IDEMPOTENCY_KEY))
    except InvalidIdempotencyKey as exc:
        return bad_request("bad-idempotency-key", str(exc))
    try:
        hooks = TestHooks.parse(headers) if test_hooks else None
    except BadTestHook as exc:
        return bad_request("bad-test-hook", str(exc))
    return key, hooks


def _operation(
    method: str, path: str, headers: Headers, head: tuple[str, TestHooks | None], body: Any
) -> OperationRequest | OpResult:
    """The operation of a request whose key and body passed, or the 400 of a header."""
    clock = read_clock(headers.get(CLOCK))
    if isinstance(clock, OpResult):
        return clock
    try:
        # An empty header is no header, as before.
        op_id = optional_token(
            headers.get(OPERATION_ID) or None, OPERATION_ID, MAX_OPERATION_ID_LENGTH
        )
        if_match = optional_token(headers.get(IF_MATCH) or None, IF_MATCH, MAX_ETAG_LENGTH)
    except InvalidIdentifier as exc:
        return bad_request("bad-header", str(exc))
    header = contract.header_refusal(headers)  # what the document publishes
    if header is not None:
        return bad_request(*header)
    key, hooks = head
    return OperationRequest(
        method=method,
        path=path,
        body=body,
        key=key,
        operation_id=op_id or key,
        clock=clock or None,
        if_match=unquote_etag(if_match) if if_match else None,
        hooks=hooks,
    )


def _decode(raw: bytes | bytearray) -> Any:
    """``strictjson.loads`` with a refusal returned, as ``batch_wire.read_batch`` does."""
    try:
        return strictjson.loads(raw)
    except JsonRefused as exc:
        return exc.with_traceback(None)


class Unhandled:
    """ASGI middleware: an exception no route answered (an application's read route, a
    bug) is answered 500 with problem+json and an error id, logged once with that id, and
    ends here. Starlette's own answer is plain text without an id, and it raises the
    exception on to uvicorn, which logs it again, without one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:  # too late for an answer: the server ends the connection
                raise
            result = server_error(
                "internal-error",
                "the request failed",
                exc,
                log,
                "%s %s failed",
                scope.get("method", "?"),
                loggable(route_path(scope)),
            )
            await render_result(result)(scope, receive, send)


async def route_problem(request: Request, exc: Exception) -> Response:
    """The router's own 404 and 405 as problems naming the method and path, like every
    other refusal (Starlette answers them in plain text)."""
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Every method served at this path, not only the first matching route's: the
        # intake's writes and the app's reads of /notes/{id} are two routes.
        allowed = headers["Allow"] = ", ".join(sorted(served_methods(request)))
        result = problem_result(
            405,
            "method-not-allowed",
            "Method not allowed",
            f"{method} is not allowed on {path}; allowed: {allowed}",
        )
    elif exc.status_code == 404:
        result = problem_result(404, "no-such-route", "Not found", f"no route {method} {path}")
    else:
        detail = f"{method} {path}: {exc.detail}"
        result = problem_result(exc.status_code, "http-error", str(exc.detail), detail)
    response = render_result(result)
    response.headers.update(headers)
    return response


def served_methods(request: Request) -> set[str]:
    """The methods of every route of the app whose path matches the request's."""
    methods: set[str] = set()
    # Matched again from the top: a Mount's router left its own root_path in the scope.
    scope = request.scope
    top = {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
    _collect_methods(request.app.router.routes, top, methods)
    return methods


def _collect_methods(routes: Iterable[BaseRoute], scope: Scope, methods: set[str]) -> None:
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.NONE:
            continue
        inner = getattr(route, "route", route)  # an access.Guarded route's own route
        if isinstance(inner, Mount):
            _collect_methods(inner.routes, {**scope, **child}, methods)
        else:
            methods.update(getattr(inner, "methods", None) or ())
