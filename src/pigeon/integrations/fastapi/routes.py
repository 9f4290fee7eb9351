"""``@pigeon.idempotent``: a FastAPI route whose effect happens once per Idempotency-Key.

    pigeon = Pigeon(principal=current_user)      # a dependency naming the caller

    @app.post("/orders", status_code=201)
    @pigeon.idempotent
    def create_order(order: OrderIn, session: Session = Depends(get_session)) -> OrderOut:
        row = Order(**order.model_dump()); session.add(row); session.flush()
        defer(session, queue="payments", task="charge", payload={"order": row.id})
        return OrderOut.model_validate(row)

    pigeon.install(app)    # the refusals answered, and in the OpenAPI document

The request is read as the intake reads it (`pigeon.server.messages.parse_request`: the
key, the strict JSON body, the headers' rules; a refusal there stores nothing) before
anything else of the route: its other dependencies and FastAPI's validation of the body,
which decodes it laxly (``NaN``, a repeated key) and may fail on what it took (a 422
quoting ``NaN`` cannot be rendered). Once ``install`` has run, a middleware reads it so
when FastAPI first asks for the body, before FastAPI decodes any of it, under the body
limit; the refusal is answered as the intake's, problem+json (without ``install``: the
route's dependency reads it, after FastAPI, and answers FastAPI's ``{"detail": ...}``). Then
`pigeon.integrations.claims` claims the key in the handler's own session (the parameter
annotated ``Session`` or ``AsyncSession``), runs the handler, stores its answer and
commits. A replay answers the stored response without calling the handler.

FastAPI's validation is pydantic's: a model in its default lax mode takes ``true`` as
the integer 1 and ``"5"`` as 5. Say ``model_config = ConfigDict(strict=True)`` (or
``Field(strict=True)``) where a body's integer must be one.

What the handler returns is what is stored and sent: a ``Response`` as it is, anything
else as FastAPI's ``JSONResponse`` of it with the route's status code (``response_model``
filtering does not apply: return the model you mean to send). An ``HTTPException`` is
FastAPI's ``{"detail": ...}`` answer, stored or not by its status like any other.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, cast, get_args, get_origin, get_type_hints

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Receive, Scope, Send

from pigeon.core.wire import IDEMPOTENCY_KEY, MAX_KEY_LENGTH
from pigeon.integrations.claims import Claims
from pigeon.integrations.fastapi.answers import PROBLEMS, answer, result_of
from pigeon.integrations.fastapi.batch import add_batch_route
from pigeon.integrations.fastapi.served import Served, served_by
from pigeon.integrations.fastapi.sessions import AsyncSessionWork, SessionWork
from pigeon.server.auth import ANONYMOUS
from pigeon.server.body_first import Take, read_first
from pigeon.server.idempotency import CLAIM_WAIT, IdempotencyPolicy
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, DEFAULT_MAX_BODY, checked_limits
from pigeon.server.messages import parse_request, read_request
from pigeon.server.operations import OperationRequest
from pigeon.server.options import ServerOptions
from pigeon.server.results import OpResult
from pigeon.storage.crypto import Keyring

F = TypeVar("F", bound=Callable[..., Any])

INCOMING = "pigeon_incoming_"  # the hidden parameter the decorator adds to the handler
_OPERATION = "pigeon.operation"  # the scope's key for the operation read before FastAPI
KEY_DOC = (
    "Required. The same key for every retry of one operation, a new one for the next "
    "operation (1-255 printable characters)."
)


@dataclass(frozen=True, slots=True)
class Incoming:
    """One request as the claims read it (a refused one raised ``Refused`` instead)."""

    principal: str
    op: OperationRequest
    status_code: int  # the route's default status
    served: Served  # the app's claims, keyring and limits


class Refused(HTTPException):
    """The refusal of a request ``parse_request`` would not take, raised by the route's
    first dependency so that nothing of the route runs, nor validates, after it.
    ``install`` answers it as it is (``result``); FastAPI's default handler would answer
    ``{"detail": ...}`` with its status."""

    def __init__(self, result: OpResult) -> None:
        found = result.body
        detail = found.get("detail") if isinstance(found, dict) else None
        headers = {k: v for k, v in result.headers if k.lower() != "content-type"}
        super().__init__(result.status, detail or result.body_text, headers or None)
        self.result = result


async def _refused(request: Request, exc: Exception) -> Response:
    return answer(cast(Refused, exc).result)


class _ReadFirst:
    """The body of a guarded route's request read by the intake's rules (``read_first``)
    when FastAPI, having chosen the route, asks for it: not whole first, whatever its
    size, nor decoded by FastAPI first. A refusal is ``Refused``, which FastAPI raises
    again as it reads a body."""

    def __init__(self, app: ASGIApp, take: Take) -> None:
        self.app = app
        self.take = take

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            receive = read_first(scope, receive, self.take)
        await self.app(scope, receive, send)


def _anonymous() -> str:
    return ANONYMOUS


class Pigeon:
    """The idempotent routes of one application: their policy, principal and keyring.

    ``principal``: a FastAPI dependency returning who calls (keys are scoped by it);
    without one every caller is ``anonymous``. ``keyring``: seal the stored responses and
    job payloads as the database's other openers do. ``max_body``, ``max_batch_body``: the
    most bytes of one operation's body and of a batch's. ``after_commit(keys)``: called
    after the commit that stored their answers, before the reply (the crash tests' gap)."""

    def __init__(
        self,
        *,
        principal: Callable[..., Any] | None = None,
        policy: IdempotencyPolicy | None = None,
        keyring: Keyring | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        max_batch_body: int = DEFAULT_MAX_BATCH_BODY,
        claim_wait: float = CLAIM_WAIT,
        after_commit: Callable[[list[str]], None] | None = None,
    ) -> None:
        claims = Claims(
            policy or IdempotencyPolicy(), claim_wait=claim_wait, after_commit=after_commit
        )
        max_body, max_batch_body = checked_limits(max_body, max_batch_body)
        self.served = Served(claims, keyring, max_body, max_batch_body=max_batch_body)
        # The apps installed with a server's options (pigeon serve --app), each its own.
        self._apps: weakref.WeakKeyDictionary[Any, Served] = weakref.WeakKeyDictionary()
        self._incoming = _incoming_dependency(principal or _anonymous, self._served_for)
        self.operation = _operation_dependency(self._incoming)
        self.guarded: set[Callable[..., Any]] = set()

    def idempotent(self, endpoint: F | None = None, *, session: str | None = None) -> Any:
        """Decorate a route's endpoint (below ``@app.post(...)``); ``session``: the name of
        its session parameter when its annotation does not say ``Session``."""

        def decorate(fn: F) -> F:
            wrapper = self._wrap(fn, session)
            self.guarded.add(wrapper)
            return wrapper

        return decorate if endpoint is None else decorate(endpoint)

    def _wrap(self, fn: F, session_name: str | None) -> F:
        signature = _typed_signature(fn)
        name = session_name or _session_parameter(signature)
        hidden = inspect.Parameter(
            INCOMING,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[Any, Depends(self._incoming)],
        )
        if asyncio.iscoroutinefunction(fn):
            wrapper: Callable[..., Any] = self._async_wrapper(fn, name)
        else:
            wrapper = self._sync_wrapper(fn, name)
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(wrapper, attribute, getattr(fn, attribute, None))
        wrapper.__signature__ = _with(signature, hidden)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    def _sync_wrapper(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Response:
            incoming: Incoming = kwargs.pop(INCOMING)
            served = incoming.served
            work = SessionWork(kwargs[name], served.keyring)

            def handler() -> OpResult:
                return _called(fn, args, kwargs, incoming.status_code)

            return answer(served.claims.run(work, incoming.principal, incoming.op, handler))

        return wrapper

    def _async_wrapper(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        async def wrapper(*args: Any, **kwargs: Any) -> Response:
            incoming: Incoming = kwargs.pop(INCOMING)
            served = incoming.served
            work = AsyncSessionWork(kwargs[name], served.keyring)

            async def handler() -> OpResult:
                try:
                    returned = await fn(*args, **kwargs)
                except HTTPException as exc:
                    return _http_exception(exc)
                return result_of(returned, incoming.status_code)

            op = incoming.op
            return answer(await served.claims.run_async(work, incoming.principal, op, handler))

        return wrapper

    def install(
        self, app: FastAPI, *, batch: bool = False, options: ServerOptions | None = None
    ) -> None:
        """Answer the refusals of every route this ``Pigeon`` guards with problem+json,
        and put them and its required Idempotency-Key header into ``app``'s OpenAPI
        document (call it before the app serves). ``batch``:
        serve the edge's batches too (`pigeon.integrations.fastapi.batch`). ``options``:
        ``pigeon serve``'s, for this app's requests (`pigeon.integrations.fastapi.served`)."""
        if options is not None:
            self._apps[app] = served_by(options, self.served)
        app.add_exception_handler(Refused, _refused)
        if batch:
            add_batch_route(app, max_body=self._served_for(app).max_batch_body)
        # FastAPI reads a body whole before any dependency; once per app, however often
        # this Pigeon is installed on it.
        if not any(m.kwargs.get("take") == self._take for m in app.user_middleware):
            app.add_middleware(_ReadFirst, take=self._take)
        guarded = {
            (route.path_format, method.lower())
            for route in app.routes
            if isinstance(route, APIRoute) and route.endpoint in self.guarded
            for method in route.methods or ()
        }
        generate = app.openapi

        def openapi() -> dict[str, Any]:
            document = generate()
            for path, operations in document.get("paths", {}).items():
                for method, operation in operations.items():
                    if (path, method) in guarded:
                        _document(operation)
            return document

        app.openapi = openapi  # type: ignore[method-assign]

    async def _take(self, request: Request) -> bytes | None:
        """The body of a request to a route of ours (None: another's), read and parsed as
        the intake does, before FastAPI decodes it; the operation is kept for
        ``incoming``, a refusal raised (``Refused``)."""
        if request.scope.get("endpoint") not in self.guarded:
            return None
        served = self._served_for(request.app)
        read = await read_request(request, max_body=served.max_body, test_hooks=served.test_hooks)
        if isinstance(read, OpResult):
            raise Refused(read)
        raw, request.scope[_OPERATION] = read
        return bytes(raw)

    def _served_for(self, app: Any) -> Served:
        """How ``app``'s requests are read and claimed (its server's options, if any)."""
        return self._apps.get(app, self.served)


def _called(fn: Callable[..., Any], args: Any, kwargs: Any, status: int) -> OpResult:
    try:
        returned = fn(*args, **kwargs)
    except HTTPException as exc:
        return _http_exception(exc)
    return result_of(returned, status)


def _http_exception(exc: HTTPException) -> OpResult:
    """FastAPI's own answer to ``exc`` (its default handler's)."""
    response = JSONResponse(
        {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
    )
    return result_of(response, exc.status_code)


def _incoming_dependency(
    principal: Callable[..., Any], served_for: Callable[[Any], Served]
) -> Callable[..., Any]:
    async def incoming(request: Request, caller: Any, key: str | None = None) -> Incoming:
        served = served_for(request.app)
        op = request.scope.get(_OPERATION)  # read before FastAPI decoded it (``_take``)
        if op is None:
            op = await parse_request(
                request, max_body=served.max_body, test_hooks=served.test_hooks
            )
        if isinstance(op, OpResult):
            raise Refused(op)
        route = request.scope.get("route")
        status = getattr(route, "status_code", None) or 200
        return Incoming(str(caller), op, status, served)

    # Said with objects, not with this module's postponed annotations, which FastAPI would
    # evaluate where ``principal`` is no name. The header is read (every line of it) by
    # ``parse_request``: declared here for the OpenAPI document.
    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    incoming.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("request", keyword, annotation=Request),
            inspect.Parameter("caller", keyword, annotation=Annotated[Any, Depends(principal)]),
            inspect.Parameter(
                "key",
                keyword,
                default=None,
                annotation=Annotated[
                    str | None, Header(alias=IDEMPOTENCY_KEY, description=KEY_DOC)
                ],
            ),
        ]
    )
    return incoming


def _operation_dependency(incoming: Callable[..., Any]) -> Callable[..., Any]:
    """``Depends(pigeon.operation)``: the request as the claims read it (its key, operation
    id, ``If-Match`` and clock stamp by the intake's rules), for a handler to record."""

    async def operation(found: Any) -> OperationRequest:
        return cast(OperationRequest, found.op)

    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    operation.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("found", keyword, annotation=Annotated[Any, Depends(incoming)])],
        return_annotation=OperationRequest,
    )
    return operation


def _typed_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature with its annotations evaluated where ``fn`` was written."""
    signature = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
    ]
    return signature.replace(
        parameters=params, return_annotation=hints.get("return", signature.return_annotation)
    )


def _session_parameter(signature: inspect.Signature) -> str:
    for param in signature.parameters.values():
        annotation = param.annotation
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
        if isinstance(annotation, type) and issubclass(annotation, Session | AsyncSession):
            return param.name
    raise TypeError(
        "an @idempotent endpoint takes its SQLAlchemy Session or AsyncSession as a "
        "parameter annotated so (or name it: @idempotent(session='db'))"
    )


def _with(signature: inspect.Signature, hidden: inspect.Parameter) -> inspect.Signature:
    """``signature`` with ``hidden`` first, every other parameter keyword-only (FastAPI
    passes them so): FastAPI solves a route's dependencies in their order, and this one
    refuses the request before any other runs."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [
        p.replace(kind=keyword) if p.kind in positional else p
        for p in signature.parameters.values()
        if p.kind is not inspect.Parameter.VAR_POSITIONAL
    ]
    return signature.replace(parameters=[hidden, *params])


def _document(operation: dict[str, Any]) -> None:
    """One guarded operation's refusals (beside FastAPI's own answers of the same
    status: another media type) and its Idempotency-Key header, required."""
    responses = operation.setdefault("responses", {})
    for status, problem in PROBLEMS.items():
        entry = responses.setdefault(str(status), {"description": problem["description"]})
        entry.setdefault("content", {}).update(problem["content"])
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "header" and parameter.get("name") == IDEMPOTENCY_KEY:
            parameter["required"] = True
            parameter["schema"] = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH}
