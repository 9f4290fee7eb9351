"""The idempotent intake: key claim + application handler + stored response, ONE commit.

A handler receives an ``IntakeContext`` whose ``tx`` is the open transaction that also
holds the key's claim; whatever it writes there (business rows, jobs, outbox entries)
commits together with the stored response, or not at all. So a crash at any point
leaves either nothing (the retry runs) or everything (the retry replays).

Outcomes of running a handler:

- 2xx: the effect commits with the stored response.
- 4xx (after execution began): the handler's writes roll back to a savepoint, the 4xx is
  stored and committed under the key: retries get the same answer, deterministically.
- 5xx or an exception: everything of that operation rolls back, the claim included, so a
  retry runs again. In a batch this is a transient failure that stops the batch.

Each operation costs ONE savepoint, around the handler and its completion. The claim is
written before it, in the enclosing transaction, so (on PostgreSQL) its row lock is held
until the commit and no request with the same key slips in when the savepoint rolls
back; a transient failure then deletes the claim by its token. On PostgreSQL every
savepoint that writes is a subtransaction, and past 64 in one transaction the backend's
subxid cache overflows, which can slow other sessions' snapshots on a busy server. A
whole batch is one commit by default, as the protocol promises; ``batch_chunk=64`` makes a
PostgreSQL deployment with many connections commit every 64 operations instead (each
still atomic with its claim; a retried batch replays the chunks that committed). Measured
here, with few connections, the chunking only cost throughput (5-25% on batches of 100).

A replay answers the stored response; a route with ``on_replay`` answers the current
state instead (``pigeon.server.replay``).

Claim modes. ``inline`` (default) inserts the claim in the handler's transaction: one
commit per request. Concurrent requests with the same key then wait on the database
(SQLite's single writer, PostgreSQL's unique index) and see the completed result: one
effect, identical bodies, and nothing is ever left "in progress" by a dead process
because its transaction dies with it. ``separate`` commits the claim first (state
``in_progress`` with ``locked_until``) and the work second, fenced by the claim's token:
concurrent requests get 409 with ``Retry-After`` instead of waiting, at the price of a
second commit, and a claim orphaned by a crash becomes retryable after ``lock_timeout``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import Context, copy_context
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from starlette.convertors import Convertor
from starlette.routing import compile_path

from pigeon.clock import HLCTimestamp, HybridLogicalClock
from pigeon.exceptions import ConfigurationError, InvalidOperation, ValidationError
from pigeon.protocol import wire
from pigeon.protocol.wire import canonical_json
from pigeon.server.fingerprint import fingerprint
from pigeon.server.idempotency import (
    PURGE_BATCH,
    Claim,
    Decision,
    IdempotencyPolicy,
    IdempotencyStore,
    StoredResponse,
)
from pigeon.server.replay import (
    ReplayHook,
    ReplayInfo,
    hooked_refusal,
    refresh_all,
    refusal,
)
from pigeon.server.results import (
    STORE_DOWN,
    OpResult,
    lost_claim,
    normalise,
    problem_result,
    retried,
    store_down,
    store_unavailable,
    stored,
)
from pigeon.server.validation import RequestCheck, Validator
from pigeon.server.validation import invalid as _invalid
from pigeon.storage.base import Database, Tx

log = logging.getLogger(__name__)

ClaimMode = Literal["inline", "separate"]
HandlerResult = tuple[int, Any] | tuple[int, Any, Mapping[str, str]]
Handler = Callable[["IntakeContext"], HandlerResult]
WRITE_METHODS = frozenset(wire.WRITE_METHODS)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


class _Failed(Exception):
    """A handler outcome that must roll back its savepoint (4xx) or the whole op (5xx)."""

    def __init__(self, result: OpResult) -> None:
        super().__init__(result.status)
        self.result = result


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    template: str
    handler: Handler
    regex: Any
    convertors: dict[str, Convertor[Any]]
    on_replay: ReplayHook | None = None
    check: RequestCheck | None = None  # checked before the claim (`pigeon.server.validation`)

    @property
    def request_schema(self) -> Mapping[str, Any] | None:
        """The body's JSON Schema: enforced before the claim, published in the OpenAPI."""
        return None if self.check is None else self.check.schema


@dataclass
class Intake:
    """Registered operation handlers and the machinery that applies them exactly once."""

    db: Database
    policy: IdempotencyPolicy = field(default_factory=IdempotencyPolicy)
    now: Callable[[], float] = time.time
    claim_mode: ClaimMode = "inline"
    clock: HybridLogicalClock = field(default_factory=lambda: HybridLogicalClock("server"))
    # Called with the keys whose effects were just committed, before anyone is answered:
    # the hook the crash tests use to die in exactly that gap.
    after_commit: Callable[[list[str]], None] | None = None
    routes: list[_Route] = field(default_factory=list)
    # Operations per batch transaction; None: the whole batch in one transaction.
    batch_chunk: int | None = None

    def __post_init__(self) -> None:
        if self.claim_mode not in ("inline", "separate"):
            raise InvalidOperation("claim_mode must be 'inline' or 'separate'")
        if self.batch_chunk is not None and self.batch_chunk < 1:
            raise ConfigurationError(f"batch_chunk must be at least 1, not {self.batch_chunk}")
        self.store = IdempotencyStore(self.policy, now=self.now)

    # -- registration ----------------------------------------------------------------

    def operation(
        self,
        method: str,
        path: str,
        *,
        on_replay: ReplayHook | None = None,
        request_schema: Mapping[str, Any] | None = None,
        validate: Validator | None = None,
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.add_operation(
                method,
                path,
                handler,
                on_replay=on_replay,
                request_schema=request_schema,
                validate=validate,
            )
            return handler

        return register

    def add_operation(
        self,
        method: str,
        path: str,
        handler: Handler,
        *,
        on_replay: ReplayHook | None = None,
        request_schema: Mapping[str, Any] | None = None,
        validate: Validator | None = None,
    ) -> None:
        """Register ``handler``; ``on_replay(tx, stored_body, info)`` answers its replays
        with the current state (``pigeon.server.replay``).

        ``request_schema`` (a JSON Schema of the body, published in the OpenAPI document)
        and ``validate(body, path_params)`` (raising ``ValidationError``) are checked
        before the key is claimed: a request they refuse is answered 400 (or 422) and
        stores nothing, so the corrected request runs under the same key."""
        method = method.upper()
        if method not in WRITE_METHODS:
            raise InvalidOperation(f"only {sorted(WRITE_METHODS)} take an idempotency key")
        regex, _, convertors = compile_path(path)
        check = RequestCheck.of(request_schema, validate)
        route = _Route(method, path, handler, regex, convertors, on_replay, check)
        self.routes.append(route)

    def match(self, method: str, path: str) -> tuple[_Route, dict[str, Any]] | None:
        """The route for (method, path), or None; raises if the path matches another method."""
        allowed = []
        for route in self.routes:
            found = route.regex.match(path)
            if found is None:
                continue
            if route.method == method.upper():
                params = {k: route.convertors[k].convert(v) for k, v in found.groupdict().items()}
                return route, params
            allowed.append(route.method)
        if allowed:
            raise _Failed(
                problem_result(
                    405,
                    "method-not-allowed",
                    "Method not allowed",
                    f"{method} {path} is not an operation; allowed: {', '.join(allowed)}",
                )
            )
        return None

    # -- applying --------------------------------------------------------------------

    def execute(self, principal: str, op: OperationRequest) -> OpResult:
        """Apply one operation (the single-request route). Never raises for bad input."""
        try:
            if self.claim_mode == "separate":
                result = self._execute_separate(principal, op)
            else:
                result = self._transact(lambda tx: self._apply(tx, principal, op))
        except _Failed as failed:
            return failed.result
        except STORE_DOWN as exc:
            return store_unavailable(exc)
        self._notify([result])
        return refresh_all(self.db, [result])[0]

    def execute_group(
        self,
        items: Sequence[tuple[str, OperationRequest]],
        contexts: Sequence[Context] | None = None,
    ) -> list[OpResult]:
        """Apply independent single-operation requests that arrived together, in ONE
        transaction (group commit: one fsync for all of them); the caller answers them
        only after this returns, so no answer ever precedes its commit.

        ``contexts``: each request's own context variables (what its middleware set, such
        as the sending device's clock), in which its operation is applied; without them
        every request of the group would see those of the thread running the group.

        Unlike a batch, nothing here stops at a transient failure: each operation's
        savepoint and claim are already undone when its result says "retry", so every
        result is what ``execute`` alone would have answered. A deadlock victim runs the
        whole group again (``_transact``); should the transaction fail for another reason
        (a bug), the requests are applied again one by one, so the failure stays with its
        own request."""
        if contexts is not None and len(contexts) != len(items):
            raise ValueError(f"{len(items)} requests but {len(contexts)} contexts")
        # Without them, each runs in a copy of this thread's: the same variables.
        runs = [*contexts] if contexts is not None else [copy_context() for _ in items]
        pairs = list(zip(runs, items, strict=True))
        if self.claim_mode == "separate" or len(items) == 1:
            return [ctx.run(self._execute_alone, p, op) for ctx, (p, op) in pairs]
        try:
            results = self._transact(
                lambda tx: [ctx.run(self._apply_or_refuse, tx, p, op) for ctx, (p, op) in pairs]
            )
        except STORE_DOWN as exc:
            return [store_unavailable(exc)] * len(items)  # nothing committed
        except Exception:
            log.warning("a group of %d requests failed, applying them one by one", len(items))
            return [ctx.run(self._execute_alone, p, op) for ctx, (p, op) in pairs]
        self._notify(results)
        return refresh_all(self.db, results)

    def _execute_alone(self, principal: str, op: OperationRequest) -> OpResult:
        try:
            return self.execute(principal, op)
        except Exception as exc:
            log.exception("%s %s failed", op.method, op.path)
            return problem_result(
                500, "intake-failed", "Internal error", f"{type(exc).__name__}: {exc}"
            )

    def _apply_or_refuse(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        try:
            return self._apply(tx, principal, op)
        except _Failed as failed:
            return failed.result

    def execute_batch(
        self, principal: str, ops: list[OperationRequest | OpResult]
    ) -> list[OpResult]:
        """Apply ops in order, each under its own key and savepoint, in ONE transaction
        (in transactions of ``batch_chunk`` operations when it is set).

        An ``OpResult`` in ``ops`` is an entry refused before parsing (bad key, bad
        JSON): it is reported in place and the batch goes on, as for any permanent
        failure. The batch stops after the first transient result.
        """
        results: list[OpResult] = []
        chunk = self.batch_chunk or len(ops) or 1
        # STORE_DOWN propagates: the caller answers 503 for what did not commit. The
        # chunks before it committed, and a retry of the batch replays them.
        # Even an empty batch opens its transaction: a dead store answers 503, not 200.
        for start in range(0, len(ops), chunk) or [0]:
            done = self._chunk(principal, ops[start : start + chunk])
            self._notify(done)
            results.extend(done)
            if done and done[-1].transient:
                break
        return refresh_all(self.db, results)

    def _chunk(self, principal: str, ops: list[OperationRequest | OpResult]) -> list[OpResult]:
        def apply(tx: Tx) -> list[OpResult]:
            results: list[OpResult] = []
            for op in ops:
                result = (
                    op if isinstance(op, OpResult) else self._apply_or_refuse(tx, principal, op)
                )
                results.append(result)
                if result.transient:
                    break
            return results

        return self._transact(apply)

    def purge(self, batch: int = PURGE_BATCH) -> tuple[int, int]:
        """Purge in bounded batches, one short transaction each, until nothing is due."""
        if batch < 1:
            raise ConfigurationError(f"the purge batch must be at least 1, not {batch}")
        responses = claims = 0
        while True:
            with self._transaction() as tx:
                purged, deleted = self.store.purge(tx, batch)
            responses += purged
            claims += deleted
            if purged < batch and deleted < batch:
                return responses, claims

    # -- internals -------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with self.db.transaction() as tx:
            yield tx

    def _transact(self, work: Callable[[Tx], T]) -> T:
        """``work`` in a transaction of its own, run again from the start when the database
        aborts it as a deadlock victim (``results.retried``): nothing of it committed."""

        def attempt() -> T:
            with self._transaction() as tx:
                return work(tx)

        return retried(attempt)

    def _apply(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        """Claim, run, store: raises ``_Failed`` for a transient outcome (roll it all back)."""
        route, params = self._route(op)
        self._check(route, params, op)
        decision = self._claim(tx, principal, op)
        if decision.claim is None:
            return self._refused(decision, route, params, principal, op)
        return self._run(tx, decision.claim, route, params, principal, op)

    def _execute_separate(self, principal: str, op: OperationRequest) -> OpResult:
        route, params = self._route(op)
        self._check(route, params, op)
        decision = self._transact(lambda tx: self._claim(tx, principal, op))
        if decision.claim is None:
            return self._refused(decision, route, params, principal, op)
        claim = decision.claim

        def work(tx: Tx) -> OpResult:
            if not self.store.fence(tx, claim):
                return lost_claim(op.key)
            return self._run(tx, claim, route, params, principal, op)

        try:
            return self._transact(work)  # a deadlock victim runs again under the same claim
        except BaseException:
            with contextlib.suppress(*STORE_DOWN), self._transaction() as tx:
                self.store.release(tx, claim)
            raise

    def _route(self, op: OperationRequest) -> tuple[_Route, dict[str, Any]]:
        found = self.match(op.method, op.path)
        if found is None:
            raise _Failed(
                problem_result(
                    404, "no-such-operation", "Not found", f"no operation {op.method} {op.path}"
                )
            )
        return found

    @staticmethod
    def _check(route: _Route, params: dict[str, Any], op: OperationRequest) -> None:
        """The route's declared validation, before the claim: a refusal stores nothing."""
        if route.check is not None:
            refused = route.check.refusal(op.body, params)
            if refused is not None:
                raise _Failed(refused)

    def _claim(self, tx: Tx, principal: str, op: OperationRequest) -> Decision:
        return self.store.claim(
            tx,
            principal=principal,
            key=op.key,
            fingerprint=fingerprint(op.method, op.path, op.body),
            method=op.method.upper(),
            path=op.path,
            operation_id=op.operation_id,
        )

    def _run(
        self,
        tx: Tx,
        claim: Claim,
        route: _Route,
        params: dict[str, Any],
        principal: str,
        op: OperationRequest,
    ) -> OpResult:
        # Keep the server clock ahead of every operation it applied; the operation's own
        # stamp is what gets recorded (conflict resolution compares operations, not arrivals).
        if op.clock:
            self.clock.receive(HLCTimestamp.decode(op.clock))
            stamp = op.clock
        else:
            stamp = self.clock.now().encode()
        ctx = IntakeContext(
            tx=tx,
            principal=principal,
            body=op.body,
            path_params=params,
            clock=stamp,
            if_match=op.if_match,
            idempotency_key=op.key,
            operation_id=op.operation_id,
            method=op.method.upper(),
            path=op.path,
            entity=op.entity,
            now=self.now(),
        )
        try:
            # The one savepoint of this operation: the handler's writes and, for a 2xx,
            # the stored response (a claim lost meanwhile takes the writes back with it).
            with tx.savepoint():
                status, body, headers = normalise(route.handler(ctx))
                result = OpResult(
                    status,
                    "" if body is None else canonical_json(body),
                    headers,
                    committed_key=claim.key,
                )
                if status >= 400:
                    raise _Failed(result)
                self._complete(tx, claim, result)
            return result
        except ValidationError as exc:
            # Checked late, by the handler itself: its writes are rolled back with the
            # savepoint and the key is given back, as for the declared checks before the
            # claim, so the corrected request runs under the same key. Nothing is stored.
            self.store.release(tx, claim)
            raise _Failed(_invalid(exc)) from None
        except _Failed as failed:
            if failed.result.transient:  # the claim was lost: not ours to release
                raise
            if stored(failed.result.status):  # a 4xx: writes rolled back, the answer stored
                self._complete(tx, claim, failed.result)
                return failed.result
            self.store.release(tx, claim)
            raise _Failed(
                dataclasses.replace(failed.result, transient=True, committed_key=None)
            ) from None
        except Exception as exc:
            if store_down(exc):  # not this operation's fault: the caller answers 503
                raise
            log.exception("handler for %s %s failed", op.method, op.path)
            self.store.release(tx, claim)
            raise _Failed(
                problem_result(
                    500, "handler-failed", "Internal error", f"{type(exc).__name__}: {exc}"
                )
            ) from exc

    def _complete(self, tx: Tx, claim: Claim, result: OpResult) -> None:
        stored = StoredResponse(result.status, result.body_text, result.headers)
        if not self.store.complete(tx, claim, stored):
            raise _Failed(lost_claim(claim.key))

    def _refused(
        self,
        decision: Decision,
        route: _Route,
        params: dict[str, Any],
        principal: str,
        op: OperationRequest,
    ) -> OpResult:
        if route.on_replay is None:
            return refusal(decision, op.key)
        info = ReplayInfo(
            principal=principal,
            idempotency_key=op.key,
            operation_id=decision.operation_id or op.operation_id,
            method=op.method.upper(),
            path=op.path,
            path_params=params,
            body=op.body,
            status=decision.original_status or 0,
            completed_at=decision.completed_at,
        )
        return hooked_refusal(decision, op.key, route.on_replay, info)

    def _notify(self, results: list[OpResult]) -> None:
        keys = [r.committed_key for r in results if r.committed_key is not None]
        if keys and self.after_commit is not None:
            self.after_commit(keys)
