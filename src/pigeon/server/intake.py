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
commit per request, and nothing is ever left "in progress" by a dead process because its
claim dies with its transaction. ``separate`` commits the claim first (``in_progress``
with ``locked_until``) and the work second, fenced by the claim's token, at the price of a
second commit; a claim orphaned by a crash is retryable after ``lock_timeout`` (10 s).

In progress. Either way a duplicate of a request still running is answered 409 with
``Retry-After`` without waiting for it: this process admits each key before it queues
for a transaction (``pigeon.server.inflight``), and across processes the claim's wait on
PostgreSQL is bounded (``IdempotencyStore``: ``KeyBusy`` -> 409). ``in_progress_wait``
opts in to waiting that long for the original and replaying its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import Context
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pigeon.core.clock import HybridLogicalClock
from pigeon.exceptions import ConfigurationError, InvalidOperation
from pigeon.logs import failure
from pigeon.server import handler_run, intake_batch
from pigeon.server.fingerprint import fingerprint
from pigeon.server.idempotency import (
    CLAIM_WAIT,
    PURGE_BATCH,
    ClaimDecision,
    ClaimOutcome,
    IdempotencyPolicy,
    IdempotencyStore,
    KeyBusy,
)
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.server.identifiers import loggable
from pigeon.server.inflight import InFlight
from pigeon.server.intake_batch import busy_refusal
from pigeon.server.operations import (
    WRITE_METHODS,
    Failed,
    Handler,
    HandlerResult,
    IntakeContext,
    OperationRequest,
    OperationRoute,
    Routes,
)
from pigeon.server.replay import (
    ReplayHook,
    claim_refusal,
    refresh_all,
    refresh_in,
)
from pigeon.server.results import (
    OpResult,
    lost_claim,
    problem_result,
    server_error,
    store_unavailable,
)
from pigeon.server.validation import RequestCheck, Validator
from pigeon.storage.base import Database, Tx
from pigeon.storage.errors import retried, store_down_errors

log = logging.getLogger(__name__)

ClaimMode = Literal["inline", "separate"]
MAX_IN_PROGRESS_WAIT = 30.0
__all__ = [
    "MAX_IN_PROGRESS_WAIT",
    "WRITE_METHODS",
    "ClaimMode",
    "Handler",
    "HandlerResult",
    "Intake",
    "IntakeContext",
    "OperationRequest",
]
T = TypeVar("T")


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
    routes: Routes = field(default_factory=Routes)
    # Operations per batch transaction; None: the whole batch in one transaction.
    batch_chunk: int | None = None
    # Seconds a duplicate of a request still in progress waits for it to finish (and is
    # then answered its stored response) before it gets 409 + Retry-After. 0: at once.
    in_progress_wait: float = 0.0
    # Honour the X-Pigeon-Test-* headers (`pigeon.server.testhooks`): tests and rehearsal.
    test_hooks: bool = False

    def __post_init__(self) -> None:
        if self.claim_mode not in ("inline", "separate"):
            raise InvalidOperation("claim_mode must be 'inline' or 'separate'")
        if self.batch_chunk is not None and self.batch_chunk < 1:
            raise ConfigurationError(f"batch_chunk must be at least 1, not {self.batch_chunk}")
        if not 0 <= self.in_progress_wait <= MAX_IN_PROGRESS_WAIT:
            raise ConfigurationError(
                f"in_progress_wait must be from 0 to {MAX_IN_PROGRESS_WAIT} seconds, "
                f"not {self.in_progress_wait}"
            )
        # Across processes only the database can tell that a key is in progress, and
        # PostgreSQL tells it by making the claim wait: that wait is bounded the same way.
        claim_wait = max(CLAIM_WAIT, self.in_progress_wait)
        self.store: IdempotencyStore = idempotency_store(
            self.db, self.policy, now=self.now, claim_wait=claim_wait
        )
        self.inflight = InFlight()

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
        self.routes.add(
            method,
            path,
            handler,
            on_replay=on_replay,
            check=RequestCheck.of(request_schema, validate),
        )

    def match(self, method: str, path: str) -> tuple[OperationRoute, dict[str, Any]] | None:
        """The route for (method, path), or None; raises if the path matches another method."""
        return self.routes.match(method, path)

    # -- applying --------------------------------------------------------------------

    # -- admission: a duplicate of a request in progress is answered at once ------------

    def admit(
        self, principal: str, op: OperationRequest, owner: object, *, wait: float | None = None
    ) -> OpResult | None:
        """Hold ``op``'s key in this process for ``owner`` (None), or the 409 that answers
        it because another request holds it still after ``wait`` (``in_progress_wait``)
        seconds. Whoever is admitted calls ``release`` once its transaction has ended."""
        wait = self.in_progress_wait if wait is None else wait
        slot = (principal, op.key)
        holder = self.inflight.admit(slot, owner, op.operation_id, self._expected(op), wait)
        if holder is None:
            return None
        retry_after = holder.retry_after(self.inflight.now())
        decision = ClaimDecision(
            ClaimOutcome.IN_PROGRESS, operation_id=holder.operation_id, retry_after=retry_after
        )
        return claim_refusal(decision, op.key)

    async def admit_async(
        self, principal: str, op: OperationRequest, owner: object
    ) -> OpResult | None:
        """``admit`` for the event loop: a wait, if any, happens in a worker thread."""
        refused = self.admit(principal, op, owner, wait=0)
        if refused is None or self.in_progress_wait == 0:
            return refused
        return await asyncio.to_thread(self.admit, principal, op, owner)

    def release(self, principal: str, op: OperationRequest, owner: object) -> None:
        self.inflight.leave((principal, op.key), owner)

    def _expected(self, op: OperationRequest) -> float:
        """Seconds ``op`` is expected to take: its route's recent mean, plus a test delay."""
        try:
            found = self.match(op.method, op.path)
        except Failed:
            found = None
        mean = 0.0 if found is None else self.inflight.expected(found[0].template)
        return mean + (op.hooks.delay if op.hooks is not None and self.test_hooks else 0.0)

    # -- applying --------------------------------------------------------------------

    def execute(self, principal: str, op: OperationRequest, *, tx: Tx | None = None) -> OpResult:
        """Apply one operation (the single-request route). Never raises for bad input.

        A duplicate of a request this process is still applying is answered 409 at once
        (or after ``in_progress_wait``, with the original's stored response).

        ``tx``: a transaction the application opened and will end itself (its own
        connection, lent with ``pigeon.storage.server.borrow``). The claim, the handler's
        writes and the stored response are made in a savepoint of it, beside whatever
        else the application writes there; nothing commits until the application does,
        and a rollback takes the claim with it, so the retry runs. A refusal or a failure
        of this operation rolls its savepoint back and leaves the transaction usable.
        ``after_commit`` is not called (the application commits), and a store failure
        propagates (the transaction is the application's to end)."""
        owner = object()
        refused = self.admit(principal, op, owner)
        if refused is not None:
            return refused
        try:
            if tx is not None:
                return self._execute_in(tx, principal, op)
            return self._execute(principal, op)
        finally:
            self.release(principal, op, owner)

    def _execute_in(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        """``execute`` in the caller's transaction."""
        if self.claim_mode == "separate":
            raise ConfigurationError(
                "claim_mode='separate' commits the claim on its own: it cannot run in a "
                "transaction the application owns"
            )
        try:
            with tx.savepoint():
                result = self._apply(tx, principal, op)
        except Failed as failed:
            return failed.result
        except KeyBusy as busy:  # the savepoint took the aborted claim back
            return busy_refusal(busy, op)
        if result.refresh is None:
            return result
        try:  # a replay hook's read, in a savepoint: its failure leaves the caller's tx usable
            with tx.savepoint():
                return refresh_in(tx, [result], strict=True)[0]
        except Exception as exc:
            failure(log, "replay hook failed, the stored response is sent", exc=exc)
            return dataclasses.replace(result, refresh=None)

    def _execute(self, principal: str, op: OperationRequest) -> OpResult:
        """``execute`` for an operation already admitted."""
        try:
            if self.claim_mode == "separate":
                result = self._execute_separate(principal, op)
            else:
                result = self.transact(lambda tx: self._apply(tx, principal, op))
        except Failed as failed:
            return failed.result
        except KeyBusy as busy:  # another process holds the key: nothing committed here
            return busy_refusal(busy, op)
        except store_down_errors() as exc:
            return store_unavailable(exc)
        self.notify([result])
        return refresh_all(self.store, [result])[0]

    def execute_group(
        self,
        items: Sequence[tuple[str, OperationRequest]],
        contexts: Sequence[Context] | None = None,
    ) -> list[OpResult]:
        """Apply independent single-operation requests that arrived together, in ONE
        transaction (group commit), each answered as ``execute`` alone would have been
        (``pigeon.server.intake_batch.execute_group``)."""
        return intake_batch.execute_group(self, items, contexts)

    def execute_batch(
        self, principal: str, ops: list[OperationRequest | OpResult]
    ) -> list[OpResult]:
        """Apply ops in order, each under its own key and savepoint, in ONE transaction
        (in transactions of ``batch_chunk`` operations when it is set); the batch stops
        after the first transient result (``pigeon.server.intake_batch.execute_batch``)."""
        return intake_batch.execute_batch(self, principal, ops)

    def execute_alone(self, principal: str, op: OperationRequest) -> OpResult:
        try:
            return self._execute(principal, op)
        except Exception as exc:
            return server_error(
                "intake-failed",
                "the operation could not be applied",
                exc,
                log,
                "%s %s failed",
                op.method,
                loggable(op.path),
            )

    def apply_or_refuse(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        try:
            return self._apply(tx, principal, op)
        except Failed as failed:
            return failed.result

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
        with self.store.transaction() as tx:
            yield tx

    def transact(self, work: Callable[[Tx], T]) -> T:
        """``work`` in a transaction of its own, run again from the start when the database
        aborts it as a deadlock victim (``results.retried``): nothing of it committed."""

        def attempt() -> T:
            with self._transaction() as tx:
                return work(tx)

        return retried(attempt)

    def _apply(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        """Claim, run, store: raises ``Failed`` for a transient outcome (roll it all back)."""
        route, params = self._route(op)
        self._check(route, params, op)
        decision = self._claim(tx, principal, op)
        if decision.claim is None:
            return handler_run.refused(decision, route, params, principal, op)
        return handler_run.run_handler(self, tx, decision.claim, route, params, principal, op)

    def _execute_separate(self, principal: str, op: OperationRequest) -> OpResult:
        route, params = self._route(op)
        self._check(route, params, op)
        decision = self.transact(lambda tx: self._claim(tx, principal, op))
        if decision.claim is None:
            return handler_run.refused(decision, route, params, principal, op)
        claim = decision.claim

        def work(tx: Tx) -> OpResult:
            if not self.store.fence(tx, claim):
                return lost_claim(op.key)
            return handler_run.run_handler(self, tx, claim, route, params, principal, op)

        try:
            return self.transact(work)  # a deadlock victim runs again under the same claim
        except BaseException:
            with contextlib.suppress(*store_down_errors()), self._transaction() as tx:
                self.store.release(tx, claim)
            raise

    def _route(self, op: OperationRequest) -> tuple[OperationRoute, dict[str, Any]]:
        found = self.match(op.method, op.path)
        if found is None:
            raise Failed(
                problem_result(
                    404, "no-such-operation", "Not found", f"no operation {op.method} {op.path}"
                )
            )
        return found

    @staticmethod
    def _check(route: OperationRoute, params: dict[str, Any], op: OperationRequest) -> None:
        """The route's declared validation, before the claim: a refusal stores nothing."""
        if route.check is not None:
            refused = route.check.refusal(op.body, params)
            if refused is not None:
                raise Failed(refused)

    def _claim(self, tx: Tx, principal: str, op: OperationRequest) -> ClaimDecision:
        return self.store.claim(
            tx,
            principal=principal,
            key=op.key,
            fingerprint=fingerprint(op.method, op.path, op.body),
            method=op.method.upper(),
            path=op.path,
            operation_id=op.operation_id,
        )

    def notify(self, results: list[OpResult]) -> None:
        keys = [r.committed_key for r in results if r.committed_key is not None]
        if keys and self.after_commit is not None:
            self.after_commit(keys)
