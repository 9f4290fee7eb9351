"""The ASGI application around an ``Intake``: single-operation routes, the batch route,
the health probe and the OpenAPI contract.

``create_app(intake, routes=[...])`` adds the application's read routes (no key needed)
beside the operations registered on the intake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import unquote, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Scope

from pigeon.clock import HLCTimestamp
from pigeon.protocol import strictjson
from pigeon.protocol.strictjson import JsonRefused, TooManyItems
from pigeon.protocol.wire import (
    BATCH_PATH,
    CLOCK,
    HEALTH_PATH,
    IDEMPOTENCY_KEY,
    IF_MATCH,
    MAX_BATCH,
    unquote_etag,
)
from pigeon.renames import renamed
from pigeon.server import access, memory
from pigeon.server.access import AccessPolicy, OperatorCheck
from pigeon.server.auth import Authenticator, BearerAuth
from pigeon.server.fingerprint import InvalidIdempotencyKey, check_key, validate_key
from pigeon.server.grouping import RequestGroups
from pigeon.server.identifiers import (
    MAX_ENTITY_LENGTH,
    MAX_ETAG_LENGTH,
    MAX_METHOD_LENGTH,
    MAX_OPERATION_ID_LENGTH,
    MAX_PATH_LENGTH,
    InvalidIdentifier,
    header_value,
    optional_token,
)
from pigeon.server.intake import Intake, OperationRequest
from pigeon.server.limits import (
    DEFAULT_MAX_BATCH_BODY,
    DEFAULT_MAX_BODY,
    checked_limits,
    read_body,
    read_buffer,
)
from pigeon.server.openapi import OPENAPI_PATH, build_openapi
from pigeon.server.results import OpResult, problem_result, store_unavailable
from pigeon.server.testhooks import BadTestHook, TestHooks
from pigeon.storage.errors import store_down_errors

log = logging.getLogger(__name__)

OPERATION_ID = "X-Pigeon-Operation-Id"  # optional: names the operation in "already applied"
# A clock stamp is "<15-digit wall>-<10-digit counter>-<node>": room for a node name of
# MAX_NODE_LENGTH printable characters, which every ledger row and resource row stores.
MAX_NODE_LENGTH = 64
MAX_CLOCK_LENGTH = 27 + MAX_NODE_LENGTH
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


async def decode_body(raw: bytes, what: str) -> Any:
    """The body's JSON value (None for an empty body), or the ``OpResult`` refusing it."""
    if not raw.strip():
        return None
    if len(raw) <= INLINE_JSON_BYTES:
        value = _decode(raw)
    else:
        value = await run_in_threadpool(_decode, raw)
    return bad_json(what, value) if isinstance(value, JsonRefused) else value


def render_result(result: OpResult) -> Response:
    # Encoded again here, not only when stored: a response stored before header values
    # were encoded must still replay, not answer 500 on every retry.
    headers = {name: header_value(value) for name, value in result.headers}
    media_type = headers.pop("content-type", "application/json")
    if result.status == 204 or not result.body_text:
        return Response(status_code=result.status, headers=headers)
    return Response(result.body_text, result.status, headers=headers, media_type=media_type)


def _bad_request(slug: str, detail: str) -> OpResult:
    return problem_result(400, slug, "Bad request", detail)


def _clock(value: object) -> str | OpResult:
    if value is None or value == "":
        return ""
    try:
        if not isinstance(value, str):
            raise ValueError(f"a clock stamp is a string, not {type(value).__name__}")
        if len(value) > MAX_CLOCK_LENGTH:
            raise ValueError(f"a clock stamp has at most {MAX_CLOCK_LENGTH} characters")
        stamp = HLCTimestamp.decode(value)
        if stamp.wall_ms < 0 or stamp.counter < 0:
            raise ValueError(f"a clock stamp counts up from 0: {value!r}")
        if not stamp.node.isprintable() or len(stamp.node) > MAX_NODE_LENGTH:
            raise ValueError(
                f"a clock stamp's node is at most {MAX_NODE_LENGTH} printable characters"
            )
    except ValueError as exc:
        return _bad_request("bad-clock", f"{CLOCK}: {exc}")
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
    try:
        key = validate_key(request.headers.getlist(IDEMPOTENCY_KEY))
    except InvalidIdempotencyKey as exc:
        return _bad_request("bad-idempotency-key", str(exc))
    try:
        hooks = TestHooks.parse(request.headers) if test_hooks else None
    except BadTestHook as exc:
        return _bad_request("bad-test-hook", str(exc))
    raw = await read_body(request, max_body, "one operation's request")
    if isinstance(raw, OpResult):
        return raw
    body = await decode_body(raw, "the request body")
    if isinstance(body, OpResult):
        return body
    path = route_path(request.scope)
    if not path.isprintable():  # a %00 or %0A in the path: no store keeps it as text
        return _bad_request("bad-path", f"the path {path!r} holds a control character")
    clock = _clock(request.headers.get(CLOCK))
    if isinstance(clock, OpResult):
        return clock
    try:
        # An empty header is no header, as before.
        op_id = optional_token(
            request.headers.get(OPERATION_ID) or None, OPERATION_ID, MAX_OPERATION_ID_LENGTH
        )
        if_match = optional_token(request.headers.get(IF_MATCH) or None, IF_MATCH, MAX_ETAG_LENGTH)
    except InvalidIdentifier as exc:
        return _bad_request("bad-header", str(exc))
    return OperationRequest(
        method=request.method,
        path=path,
        body=body,
        key=key,
        operation_id=op_id or key,
        clock=clock or None,
        if_match=unquote_etag(if_match) if if_match else None,
        hooks=hooks,
    )


def parse_batch_entry(entry: object, index: int) -> OperationRequest | OpResult:
    """One entry of a batch (see ``pigeon.protocol.wire``), or its permanent refusal."""
    if not isinstance(entry, dict):
        return _bad_request("bad-batch-entry", f"operations[{index}] is not an object")
    try:
        key = check_key(entry.get("idempotency_key"))
    except InvalidIdempotencyKey as exc:
        return _bad_request("bad-idempotency-key", f"operations[{index}]: {exc}")
    method, path = entry.get("method"), entry.get("path")
    if (
        not isinstance(method, str)
        or not isinstance(path, str)
        or not path.startswith("/")
        or len(method) > MAX_METHOD_LENGTH
        or len(path) > MAX_PATH_LENGTH
    ):
        return _bad_request(
            "bad-batch-entry",
            f"operations[{index}] needs a string method and an absolute path "
            f"(at most {MAX_METHOD_LENGTH} and {MAX_PATH_LENGTH} characters)",
        )
    # The path as the single-operation route sees it (ASGI gives it percent-decoded, the
    # query apart, which handlers never see): the same operation must reach the same
    # entity, and have the same fingerprint, alone or in a batch.
    path = unquote(urlsplit(path).path)
    if not path.isprintable():
        return _bad_request(
            "bad-path", f"operations[{index}]: the path {path!r} holds a control character"
        )
    clock = _clock(entry.get("clock"))
    if isinstance(clock, OpResult):
        return clock
    try:
        # "" or null: not given (the operation id is then the key, as for one request).
        # The entity names the effect in the ledger, whose index on it PostgreSQL cannot
        # fill with a few KB: refused here, not failed there on every resend.
        op_id, entity, if_match = (
            optional_token(entry.get(name) or None, f"operations[{index}].{name}", limit)
            for name, limit in (
                ("id", MAX_OPERATION_ID_LENGTH),
                ("entity", MAX_ENTITY_LENGTH),
                ("if_match", MAX_ETAG_LENGTH),
            )
        )
    except InvalidIdentifier as exc:
        return _bad_request("bad-batch-entry", str(exc))
    return OperationRequest(
        method=method.upper(),
        path=path,
        body=entry.get("body"),
        key=key,
        operation_id=op_id or key,
        clock=clock or None,
        if_match=unquote_etag(if_match) if if_match else None,
        entity=entity,
    )


_RESULT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def results_json(ids: Sequence[object], results: list[OpResult]) -> bytearray:
    """The batch's answer, ``{"results": [...]}``, with each result's body spliced in as
    the JSON text it already is (its stored text): decoding a thousand bodies only to
    encode them again doubled the memory and the time of a large batch's answer. Empties
    ``results`` as it goes, so each result's text is let go of once it is encoded."""
    out = bytearray(b'{"results":[')
    results.reverse()
    for n, op_id in enumerate(ids):
        if not results:
            break
        result = results.pop()
        rest = {
            "id": op_id,
            "status": result.status,
            "replayed": result.replayed,
            "headers": dict(result.headers),
        }
        body = result.body_text or "null"
        del result
        out += ("," if n else "").encode() + b'{"body":' + body.encode("utf-8")
        out += b"," + _RESULT.encode(rest)[1:].encode("utf-8")
    out += b"]}"
    return out


_SLICE = 64 << 10


def _sent_in_slices(body: bytearray) -> Response:
    """A large JSON answer sent a slice at a time: handed over whole, it was copied whole
    twice more on the way out (the HTTP framing, then the transport's buffer)."""
    if len(body) <= _SLICE:
        return Response(bytes(body), media_type="application/json")

    async def slices() -> AsyncIterator[bytes]:
        for start in range(0, len(body), _SLICE):
            yield bytes(body[start : start + _SLICE])

    headers = {"content-length": str(len(body))}
    return StreamingResponse(slices(), headers=headers, media_type="application/json")


def _decode_batch(held: list[Any]) -> Any:
    """``loads_members`` of the batch, with a refusal returned rather than raised: its
    traceback's frames hold the body's text (16 MiB), and an exception handed from the
    worker thread to the event loop lived on until the garbage collector found it (each
    refused 16 MiB batch kept 16 MiB more, bench/memory_bench.py)."""
    try:
        return strictjson.loads_members(held.pop(), member="operations", max_items=MAX_BATCH)
    except JsonRefused as exc:
        return exc.with_traceback(None)


def _decode(raw: bytes) -> Any:
    """``strictjson.loads`` with a refusal returned, as ``_decode_batch`` does."""
    try:
        return strictjson.loads(raw)
    except JsonRefused as exc:
        return exc.with_traceback(None)


async def _route_problem(request: Request, exc: Exception) -> Response:
    """The router's own 404 and 405 as problems naming the method and path, like every
    other refusal (Starlette answers them in plain text)."""
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
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
    response.headers.update(exc.headers or {})
    return response


def create_app(
    intake: Intake,
    *,
    routes: Sequence[BaseRoute] = (),
    authenticate: Authenticator | None = None,
    operator: OperatorCheck | None = None,
    allow_anonymous: bool | None = None,
    purge_interval: float | None = 3600.0,
    title: str = "pigeon intake",
    group_commit: bool | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_batch_body: int = DEFAULT_MAX_BATCH_BODY,
) -> Starlette:
    """``routes``: the application's own routes, each declaring who may call it
    (`pigeon.server.access`: ``user(Route(...))``, ``operator(...)``, ...); a route that
    declares nothing is refused here. The intake's operations and the batch are ``user``
    routes, the health probe and the OpenAPI document ``public``.
    ``authenticate``: names the user principal (`pigeon.server.auth`); without one, the
    ``BearerAuth`` stand-in, which verifies nothing (tests and demos only).
    ``operator``: tells the operator credential (e.g. ``access.OperatorToken(token)``);
    without one, nobody reaches the ``operator`` routes.
    ``allow_anonymous``: requests without credentials act as the one user ``anonymous``;
    by default only with the stand-in, never with an authenticator you pass.
    ``group_commit``: single-operation requests that arrive together share one
    transaction (`pigeon.server.grouping`). By default on for SQLite, whose one writer
    serialises them anyway, and off for PostgreSQL, where they run side by side.
    ``max_body`` / ``max_batch_body``: bytes of request body a single operation / a batch
    may have; more is refused with 413 before it is read whole (`pigeon.server.limits`)."""
    max_body, max_batch_body = checked_limits(max_body, max_batch_body)
    policy = AccessPolicy(
        authenticate or BearerAuth(),
        operator=operator,
        allow_anonymous=authenticate is None if allow_anonymous is None else allow_anonymous,
    )
    if group_commit is None:
        group_commit = intake.store.single_writer
    grouped = RequestGroups(intake) if group_commit else None
    spec = build_openapi(
        intake,
        title=title,
        extra_routes=routes,
        max_body=max_body,
        max_batch_body=max_batch_body,
    )
    endpoints = _Endpoints(intake, grouped, spec, max_body, max_batch_body)
    all_routes = [*_intake_routes(intake, endpoints), *routes]
    # The one place that decides: every route, mounted ones included, bound to the policy;
    # a route without a declared rule is refused here (ConfigurationError).
    access.bind(all_routes, policy)
    app = Starlette(
        routes=all_routes,
        lifespan=_lifespan(intake, purge_interval),
        exception_handlers={HTTPException: _route_problem},
    )
    # "/metrics/" must not redirect to "/metrics": the redirect would confirm to anyone
    # that a route exists before its rule is asked (see pigeon.server.access).
    app.router.redirect_slashes = False
    app.state.access = policy
    app.state.intake = intake
    app.state.group_commit = grouped
    return app


class _Endpoints:
    """The intake's routes: one operation, a batch, the health probe, the OpenAPI document."""

    def __init__(
        self,
        intake: Intake,
        grouped: RequestGroups | None,
        spec: dict[str, Any],
        max_body: int,
        max_batch_body: int,
    ) -> None:
        self.intake = intake
        self.grouped = grouped
        self.spec = spec
        self.max_body = max_body
        self.max_batch_body = max_batch_body

    async def operation(self, request: Request) -> Response:
        principal = access.principal(request)
        intake = self.intake
        parsed = await parse_request(request, max_body=self.max_body, test_hooks=intake.test_hooks)
        if isinstance(parsed, OpResult):
            return render_result(parsed)
        if self.grouped is not None:
            return render_result(await self.grouped.execute(principal, parsed))
        return render_result(await run_in_threadpool(intake.execute, principal, parsed))

    async def batch(self, request: Request) -> Response:
        principal = access.principal(request)
        raw = await read_buffer(request, self.max_batch_body, "a batch request")
        if isinstance(raw, OpResult):
            return render_result(raw)
        # Up to 16 MiB: the only reference is handed over (the holder is emptied in the
        # worker thread), so the bytes go as soon as they are text, and the decoded
        # operations as soon as they are applied, instead of living as long as this frame.
        size = len(raw)
        held: list[Any] = [raw]
        del raw
        # In a worker thread, whatever its size: up to 16 MiB must not stop the event loop.
        # The operations are decoded one by one and the count is checked at each, so a
        # body of millions of tiny entries is refused after MAX_BATCH + 1.
        held = [await run_in_threadpool(_decode_batch, held)]
        if isinstance(held[0], JsonRefused):
            refused = held.pop()
            await run_in_threadpool(memory.give_back, size)
            if isinstance(refused, TooManyItems):
                detail = f"more than {MAX_BATCH} operations, at most {MAX_BATCH}"
                return render_result(_bad_request("batch-too-large", detail))
            return render_result(bad_json("the batch body", refused))
        payload = held[0]
        if not isinstance(payload, dict) or not isinstance(payload.get("operations"), list):
            return render_result(_bad_request("bad-batch", 'a batch is {"operations": [...]}'))
        del payload
        # Checking the entries, applying them and writing the answer (up to 16 MiB of it)
        # all in the worker thread: none of it may hold up the event loop.
        return await run_in_threadpool(self.answer_batch, principal, held, size)

    def answer_batch(self, principal: str, held: list[Any], size: int) -> Response:
        entries: list[Any] = held.pop()["operations"]
        ops = [parse_batch_entry(entry, i) for i, entry in enumerate(entries)]
        ids = [entry.get("id") if isinstance(entry, dict) else None for entry in entries]
        del entries
        try:
            results = self.intake.execute_batch(principal, ops)
        except store_down_errors() as exc:
            memory.give_back(size)
            return render_result(store_unavailable(exc))
        del ops
        answer = _sent_in_slices(results_json(ids, results))
        memory.give_back(size)
        return answer

    async def health(self, request: Request) -> Response:
        # Deliberately touches no database: connectivity monitors probe it often.
        return JSONResponse({"status": "ok"})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.spec)


def _intake_routes(intake: Intake, endpoints: _Endpoints) -> list[BaseRoute]:
    """The batch, the probe, the document (each with its access rule) and one route per
    path of the intake's operations."""
    by_path: dict[str, list[str]] = {}
    for route in intake.routes:
        by_path.setdefault(route.template, []).append(route.method)
    return [
        access.user(Route(BATCH_PATH, endpoints.batch, methods=["POST"])),
        access.public(Route(HEALTH_PATH, endpoints.health, methods=["GET"])),
        access.public(Route(OPENAPI_PATH, endpoints.openapi, methods=["GET"])),
        *(
            access.user(Route(p, endpoints.operation, methods=methods))
            for p, methods in by_path.items()
        ),
    ]


def _lifespan(
    intake: Intake, purge_interval: float | None
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """Purges expired claims every ``purge_interval`` seconds while the app runs."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = None
        if purge_interval:
            task = asyncio.create_task(_purge_forever(intake, purge_interval))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return lifespan


async def _purge_forever(intake: Intake, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            responses, claims = await run_in_threadpool(intake.purge)
            log.info("purged %d stored responses and %d expired claims", responses, claims)
        except store_down_errors() as exc:
            log.warning("purge skipped, store unavailable: %s", exc)
        except Exception:
            # Any other failure of one round: logged, and the next round runs. Leaving the
            # loop ended purging until a restart, and the claims table grew without bound.
            log.exception("purge round failed; the next one runs in %s s", interval)


# Old names (deprecated, for one release): one name, one meaning across pigeon.
__getattr__ = renamed(__name__, {"render": "render_result"}, globals())
