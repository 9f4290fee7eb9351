"""The policy of one operation: its route and declared checks, the key's claim, the
handler's run (`pigeon.server.handler_run`) and the stored answer, in one transaction (or,
in the ``separate`` claim mode, the claim committed first and the work fenced by it).

``Applier`` is what the intake's single-request path and its batch and group paths
(`pigeon.server.intake_batch`) share; it holds no state of its own beyond what it is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TypeVar

from pigeon.exceptions import ConfigurationError
from pigeon.logs import failure
from pigeon.server import testhooks
from pigeon.server.handler_run import HandlerRunner, refused
from pigeon.server.idempotency import (
    ClaimDecision,
    ClaimLost,
    ClaimOutcome,
    IdempotencyStore,
    KeyBusy,
)
from pigeon.server.identifiers import loggable
from pigeon.server.operations import Failed, OperationRequest, RoutedOperation, Routes, routed
from pigeon.server.options import IntakeOptions
from pigeon.server.replay import claim_refusal, refresh_all, refresh_in
from pigeon.server.results import (
    OpResult,
    lost_claim,
    problem_result,
    server_error,
    store_unavailable,
)
from pigeon.storage.base import Tx
from pigeon.storage.errors import retried, store_down_errors

log = logging.getLogger("pigeon.server.intake")
T = TypeVar("T")


class Applier:
    """Applies operations of the intake's ``routes`` under their keys in ``store``:
    ``runner`` runs a claimed handler, ``options`` say the claim mode and batch chunks,
    ``after_commit`` is called with the keys whose effects just committed, before anyone
    is answered (the hook the crash tests use to die in exactly that gap)."""

    def __init__(
        self,
        store: IdempotencyStore,
        routes: Routes,
        runner: HandlerRunner,
        options: IntakeOptions,
        after_commit: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.store = store
        self.routes = routes
        self.runner = runner
        self.claim_mode = options.claim_mode
        self.batch_chunk = options.batch_chunk
        self.after_commit = after_commit

    def apply(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        """Claim, run, store in ``tx``; a refusal is answered, a transient outcome raises
        ``Failed`` (roll it all back)."""
        try:
            return self._apply(tx, principal, op)
        except Failed as failed:
            return failed.result

    def execute(self, principal: str, op: OperationRequest) -> OpResult:
        """Apply ``op`` (admitted already) in a transaction of its own, or two in the
        ``separate`` claim mode, and ``finish`` it. Never raises for bad input; a store
        that is down is 503."""
        return self.finish([self.commit(principal, op)])[0]

    def commit(self, principal: str, op: OperationRequest) -> OpResult:
        """``execute`` up to its commit: ``finish`` is the caller's."""
        try:
            if self.claim_mode == "separate":
                result = self._execute_separate(principal, op)
            else:
                result = self.transact(lambda tx: self._apply(tx, principal, op, last=True))
        except Failed as failed:
            return failed.result
        except ClaimLost:  # its answer, sent with the COMMIT, found it taken: no commit
            return lost_claim(op.key)
        except KeyBusy as busy:  # another process holds the key: nothing committed here
            return busy_refusal(busy, op)
        except store_down_errors() as exc:
            return store_unavailable(exc)
        return result

    def commit_safely(self, principal: str, op: OperationRequest) -> OpResult:
        """``commit``, a bug in it answered 500 with an error id (a group's fallback)."""
        try:
            return self.commit(principal, op)
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

    def execute_in(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult:
        """Apply ``op`` in a savepoint of ``tx``, a transaction the application owns."""
        if self.claim_mode == "separate":
            raise ConfigurationError(
                "claim_mode='separate' commits the claim on its own: it cannot run in a "
                "transaction the application owns",
                field="claim_mode",
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

    def transact(self, work: Callable[[Tx], T]) -> T:
        """``work`` in a transaction of its own, run again from the start when the database
        aborts it as a deadlock victim (``storage.errors.retried``): nothing of it committed."""

        def attempt() -> T:
            with self.store.transaction() as tx:
                return work(tx)

        return retried(attempt)

    def finish(self, results: list[OpResult]) -> list[OpResult]:
        """After ``results`` committed, before they are answered: ``committed``, then the
        replay hooks of the replays among them make their answers."""
        self.committed(results)
        return refresh_all(self.store, results)

    def committed(self, results: list[OpResult]) -> None:
        """``results`` just committed: ``after_commit`` hears their keys."""
        keys = [r.committed_key for r in results if r.committed_key is not None]
        if keys and self.runner.test_hooks:
            testhooks.crash_if_due(keys)
        if keys and self.after_commit is not None:
            self.after_commit(keys)

    def finishes_alone(self, results: list[OpResult]) -> bool:
        """True if ``finish`` runs none of the application's code for ``results`` (no
        ``after_commit`` to call, no replay hook): only then may it run on the event loop,
        whose bounds know the handlers' durations and nothing of those hooks."""
        if self.after_commit is not None and any(r.committed_key for r in results):
            return False
        return all(r.refresh is None for r in results)

    def _apply(
        self, tx: Tx, principal: str, op: OperationRequest, *, last: bool = False
    ) -> OpResult:
        """Claim, run, store: raises ``Failed`` for a transient outcome (roll it all back).
        ``last``: ``tx`` commits right after (``HandlerRunner.run``)."""
        call = self._routed(principal, op)
        decision = self._claim(tx, call)
        if decision.claim is None:
            return refused(decision, call)
        return self.runner.run(tx, decision.claim, call, last=last)

    def _execute_separate(self, principal: str, op: OperationRequest) -> OpResult:
        call = self._routed(principal, op)
        decision = self.transact(lambda tx: self._claim(tx, call))
        if decision.claim is None:
            return refused(decision, call)
        claim = decision.claim

        def work(tx: Tx) -> OpResult:
            if not self.store.fence(tx, claim):
                return lost_claim(op.key)
            return self.runner.run(tx, claim, call, last=True)

        try:
            return self.transact(work)  # a deadlock victim runs again under the same claim
        except BaseException:
            with contextlib.suppress(*store_down_errors()), self.store.transaction() as tx:
                self.store.release(tx, claim)
            raise

    def _routed(self, principal: str, op: OperationRequest) -> RoutedOperation:
        """``op`` matched to its route and checked as it declares, before any claim (a
        refusal stores nothing); ``Failed`` with the 404, 405 or 400 otherwise."""
        found = self.routes.match(op.method, op.path)
        if found is None:
            detail = f"no operation {op.method} {op.path}"
            raise Failed(problem_result(404, "no-such-operation", "Not found", detail))
        route, params = found
        checked_in = 0.0
        if route.check is not None:
            refusal, checked_in = route.check.timed(op.body, params)
            if refusal is not None:
                raise Failed(refusal)
        return routed(principal, op, route, params, checked_in)

    def _claim(self, tx: Tx, call: RoutedOperation) -> ClaimDecision:
        op = call.op
        return self.store.claim(
            tx,
            principal=call.principal,
            key=op.key,
            fingerprint=call.fingerprint,
            method=op.method.upper(),
            path=op.path,
            operation_id=op.operation_id,
        )


def busy_refusal(busy: KeyBusy, op: OperationRequest) -> OpResult:
    """409 for an operation whose key another process holds (its claim's wait ran out)."""
    decision = ClaimDecision(ClaimOutcome.IN_PROGRESS, operation_id=op.operation_id, retry_after=1)
    return claim_refusal(decision, busy.key)
