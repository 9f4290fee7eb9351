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
whole batch is one commit by default, as the protocol promises;
``IntakeOptions(batch_chunk=64)`` makes a PostgreSQL deployment with many connections
commit every 64 operations instead (each still atomic with its claim; a retried batch
replays the chunks that committed). Measured here, with few connections, the chunking
only cost throughput (5-25% on batches of 100).

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

The parts: ``Intake`` holds the state (made once, in ``__init__``) and the routes; one
operation's policy is the ``Applier``'s (`pigeon.server.applying`), a key in progress in
this process the ``Admission``'s (`pigeon.server.admission`), batches and groups are
`pigeon.server.intake_batch`, each given what it needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Context
from typing import Any

from pigeon.core.clock import HybridLogicalClock
from pigeon.exceptions import ConfigurationError
from pigeon.server import intake_batch
from pigeon.server.admission import Admission
from pigeon.server.applying import Applier
from pigeon.server.handler_run import HandlerRunner
from pigeon.server.idempotency import CLAIM_WAIT, PURGE_BATCH, IdempotencyStore
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.server.inflight import InFlight
from pigeon.server.operations import (
    WRITE_METHODS,
    Handler,
    HandlerResult,
    IntakeContext,
    ManyHandler,
    OperationRequest,
    OperationRoute,
    Routes,
)
from pigeon.server.options import MAX_IN_PROGRESS_WAIT, ClaimMode, IntakeOptions
from pigeon.server.replay import ReplayHook
from pigeon.server.results import OpResult
from pigeon.server.validation import RequestCheck, Validator
from pigeon.storage.base import Database, Tx

__all__ = [
    "MAX_IN_PROGRESS_WAIT",
    "WRITE_METHODS",
    "ClaimMode",
    "Handler",
    "HandlerResult",
    "Intake",
    "IntakeContext",
    "IntakeOptions",
    "OperationRequest",
]


class Intake:
    """Registered operation handlers and the machinery that applies them exactly once.

    ``options``: how it applies them (`IntakeOptions`: idempotency policy, claim mode,
    in-progress wait, batch chunks, test hooks). ``now`` and ``clock``: the wall clock and
    the server's hybrid logical clock. ``after_commit``: called with the keys whose effects
    were just committed, before anyone is answered (the hook the crash tests use to die in
    exactly that gap); served, in a worker thread, never on the event loop, and with no
    write transaction of the intake's open. Everything else here is state, made once, here."""

    def __init__(
        self,
        db: Database,
        options: IntakeOptions | None = None,
        *,
        now: Callable[[], float] = time.time,
        clock: HybridLogicalClock | None = None,
        after_commit: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.db = db
        self.options = options = options or IntakeOptions()
        self.now = now
        self.clock = clock or HybridLogicalClock("server")
        self.routes = Routes()
        # Across processes only the database can tell that a key is in progress, and
        # PostgreSQL tells it by making the claim wait: that wait is bounded the same way.
        claim_wait = max(CLAIM_WAIT, options.in_progress_wait)
        self.store: IdempotencyStore = idempotency_store(
            db, options.policy, now=now, claim_wait=claim_wait
        )
        self.inflight = InFlight()
        self.admission = Admission(self.inflight, self.routes, options)
        runner = HandlerRunner(self.store, self.clock, self.inflight, now, options.test_hooks)
        self._applier = Applier(self.store, self.routes, runner, options, after_commit)

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
        many: ManyHandler | None = None,
    ) -> None:
        """Register ``handler``; ``on_replay(tx, stored_body, info)`` answers its replays
        with the current state (``pigeon.server.replay``); ``many(tx, items)`` applies
        many of a batch's operations at once (``pigeon.server.intake_set``).

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
            many=many,
        )

    def match(self, method: str, path: str) -> tuple[OperationRoute, dict[str, Any]] | None:
        """The route for (method, path), or None; raises if the path matches another method."""
        return self.routes.match(method, path)

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
        refused = self.admission.admit(principal, op, owner)
        if refused is not None:
            return refused
        try:
            if tx is not None:
                return self._applier.execute_in(tx, principal, op)
            return self._applier.execute(principal, op)
        finally:
            self.admission.release(principal, op, owner)

    def execute_group(
        self,
        items: Sequence[tuple[str, OperationRequest]],
        contexts: Sequence[Context] | None = None,
    ) -> list[OpResult]:
        """Apply independent single-operation requests that arrived together (each
        admitted already), in ONE transaction (group commit), each answered as
        ``execute`` alone would have been (``pigeon.server.intake_batch.execute_group``)."""
        return intake_batch.execute_group(self._applier, items, contexts)

    def execute_batch(
        self, principal: str, ops: list[OperationRequest | OpResult]
    ) -> list[OpResult]:
        """Apply ops in order, each under its own key and savepoint, in ONE transaction
        (in transactions of ``batch_chunk`` operations when it is set); the batch stops
        after the first transient result (``pigeon.server.intake_batch.execute_batch``)."""
        return intake_batch.execute_batch(self._applier, self.admission, principal, ops)

    # -- the same in two steps: the commit, then what follows it ----------------------
    # For a caller that runs the commit where the application's other code may not run
    # (the event loop, `pigeon.server.on_loop`): ``finishes_alone`` tells it whether
    # ``finish`` may follow there, or must go where the handlers would have run.

    def admitted_batch(
        self, principal: str, ops: list[OperationRequest | OpResult]
    ) -> AbstractContextManager[list[OperationRequest | OpResult]]:
        """``ops`` admitted for the block (``intake_batch.admitted_batch``)."""
        return intake_batch.admitted_batch(self.admission, principal, ops)

    def commits_once(self, size: int) -> bool:
        """Does a batch of ``size`` operations commit once (``batch_chunk``)?"""
        return intake_batch.commits_once(self._applier, size)

    def commit_batch(
        self, principal: str, ops: list[OperationRequest | OpResult]
    ) -> list[OpResult]:
        """``execute_batch`` of admitted ``ops`` that ``commits_once``, up to its commit."""
        return intake_batch.commit_batch(self._applier, principal, ops)

    def commit_group(
        self,
        items: Sequence[tuple[str, OperationRequest]],
        contexts: Sequence[Context] | None = None,
    ) -> list[OpResult]:
        """``execute_group`` up to its commit."""
        return intake_batch.commit_group(self._applier, items, contexts)

    def finish(self, results: list[OpResult]) -> list[OpResult]:
        """What follows a commit before its answer (``Applier.finish``)."""
        return self._applier.finish(results)

    def finishes_alone(self, results: list[OpResult]) -> bool:
        """``finish`` runs none of the application's code (``Applier.finishes_alone``)."""
        return self._applier.finishes_alone(results)

    def purge(self, batch: int = PURGE_BATCH) -> tuple[int, int]:
        """Purge in bounded batches, one short transaction each, until nothing is due."""
        if batch < 1:
            raise ConfigurationError(f"the purge batch must be at least 1, not {batch}")
        responses = claims = 0
        while True:
            with self.store.transaction() as tx:
                purged, deleted = self.store.purge(tx, batch)
            responses += purged
            claims += deleted
            if purged < batch and deleted < batch:
                return responses, claims
