"""What the intake applies: an operation as received, the context its handler gets, and
the registered routes that map a method and path to a handler and its declared checks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.convertors import Convertor
from starlette.routing import compile_path

from pigeon.core import wire
from pigeon.core.wire import canonical_json
from pigeon.exceptions import InvalidOperation
from pigeon.server.fingerprint import fingerprint_canonical
from pigeon.server.replay import ReplayHook
from pigeon.server.results import OpResult, problem_result
from pigeon.server.testhooks import TestHooks
from pigeon.server.validation import RequestCheck
from pigeon.storage.base import Tx

HandlerResult = tuple[int, Any] | tuple[int, Any, Mapping[str, str]]
Handler = Callable[["IntakeContext"], HandlerResult]
# A route's set-based handler (`pigeon.server.intake_set`): many claimed operations at once,
# an answer for each it applied, None for each left to the per-operation handler.
ManyHandler = Callable[[Tx, Sequence["IntakeContext"]], Sequence[HandlerResult | None]]
WRITE_METHODS = frozenset(wire.WRITE_METHODS)
# Characters of a body's canonical text kept for its handler. A batch holds its operations
# until they are applied: kept whole, the texts of 1,000 16 KiB notes grew the server by
# 16 MiB more (bench/memory_bench.py); a note's usual text is a few hundred.
KEPT_BODY_JSON = 1 << 10

# The values made for every operation of a batch (these, OpResult, Ask) are plain slots
# dataclasses, never changed once made, but not frozen: a frozen one's __init__ sets each
# field through object.__setattr__: the four the set path makes for each operation cost it
# ~7% of its instructions.


@dataclass(slots=True)
class IntakeContext:
    """What a handler gets: the open transaction and the operation it is applying."""

    tx: Tx
    principal: str
    body: Any
    path_params: Mapping[str, Any]
    clock: str  # the operation's hybrid logical clock stamp (the server's if none was sent)
    if_match: str | None
    idempotency_key: str
    operation_id: str
    method: str
    path: str
    entity: str | None = None
    now: float = 0.0
    # The body's canonical JSON (``canonical_json(body)``, "null" for none), made once for
    # its fingerprint: a handler that stores the body as JSON text cuts it from here
    # (`pigeon.core.wire.without_member`) instead of encoding it again. None for a body
    # whose text is longer than KEPT_BODY_JSON, and where the context was made by hand.
    body_json: str | None = None


@dataclass(slots=True)
class OperationRequest:
    """One operation as received, already validated (key, JSON body, clock)."""

    method: str
    path: str
    body: Any
    key: str
    operation_id: str
    clock: str | None = None
    if_match: str | None = None
    entity: str | None = None
    hooks: TestHooks | None = None  # honoured only by an intake built with test_hooks=True


class Failed(Exception):
    """A handler outcome that must roll back its savepoint (4xx) or the whole op (5xx)."""

    def __init__(self, result: OpResult) -> None:
        super().__init__(result.status)
        self.result = result


@dataclass(frozen=True, slots=True)
class OperationRoute:
    method: str
    template: str
    handler: Handler
    regex: Any
    convertors: dict[str, Convertor[Any]]
    on_replay: ReplayHook | None = None
    check: RequestCheck | None = None  # checked before the claim (`pigeon.server.validation`)
    many: ManyHandler | None = None  # the set-based handler of batches, if any

    @property
    def request_schema(self) -> Mapping[str, Any] | None:
        """The body's JSON Schema: enforced before the claim, published in the OpenAPI."""
        return None if self.check is None else self.check.schema


@dataclass(slots=True)
class RoutedOperation:
    """An operation matched to its route: whose it is, what came, and what applies it
    (with the path's parameters)."""

    principal: str
    op: OperationRequest
    route: OperationRoute
    params: dict[str, Any]
    fingerprint: str  # of its method, path and body: what its claim records
    body_json: str | None  # the body's canonical text for its handler, if kept (`routed`)
    size: int  # characters of that text, kept or not
    checked_in: float = 0.0  # seconds the route's declared checks took (RequestCheck.timed)


def routed(
    principal: str,
    op: OperationRequest,
    route: OperationRoute,
    params: dict[str, Any],
    checked_in: float,
) -> RoutedOperation:
    """``op`` matched to ``route``, its body encoded once: for its fingerprint, and for its
    handler (``IntakeContext.body_json``) when no longer than ``KEPT_BODY_JSON``."""
    text = canonical_json(op.body)
    digest = fingerprint_canonical(op.method, op.path, text)
    kept = text if len(text) <= KEPT_BODY_JSON else None
    return RoutedOperation(principal, op, route, params, digest, kept, len(text), checked_in)


class Routes(list[OperationRoute]):
    """The intake's operations, in the order they were registered."""

    def add(
        self,
        method: str,
        path: str,
        handler: Handler,
        *,
        on_replay: ReplayHook | None = None,
        check: RequestCheck | None = None,
        many: ManyHandler | None = None,
    ) -> OperationRoute:
        method = method.upper()
        if method not in WRITE_METHODS:
            raise InvalidOperation(f"only {sorted(WRITE_METHODS)} take an idempotency key")
        regex, _, convertors = compile_path(path)
        route = OperationRoute(method, path, handler, regex, convertors, on_replay, check, many)
        self.append(route)
        return route

    def match(self, method: str, path: str) -> tuple[OperationRoute, dict[str, Any]] | None:
        """The route for (method, path), or None; raises ``Failed`` (405) if the path is an
        operation of other methods only."""
        allowed = []
        for route in self:
            found = route.regex.match(path)
            if found is None:
                continue
            if route.method == method.upper():
                params = {k: route.convertors[k].convert(v) for k, v in found.groupdict().items()}
                return route, params
            allowed.append(route.method)
        if allowed:
            raise Failed(
                problem_result(
                    405,
                    "method-not-allowed",
                    "Method not allowed",
                    f"{method} {path} is not an operation; allowed: {', '.join(allowed)}",
                )
            )
        return None
