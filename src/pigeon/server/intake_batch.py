"""The intake's paths for many operations at once: a batch (one client's operations in
order, in one transaction, stopping at the first transient result) and a group
(independent single requests that arrived together, committed together, each answered
as if alone). The policy of one operation (claim, run, store) stays in ``Intake``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextvars import Context, copy_context
from typing import Literal, Protocol, TypeVar

from pigeon.server.idempotency import ClaimDecision, ClaimOutcome, IdempotencyStore, KeyBusy
from pigeon.server.operations import OperationRequest
from pigeon.server.replay import claim_refusal, refresh_all
from pigeon.server.results import OpResult, store_unavailable
from pigeon.storage.base import Tx
from pigeon.storage.errors import store_down_errors

T = TypeVar("T")


class BatchHost(Protocol):
    """What the batch and group paths ask of the intake (`pigeon.server.intake.Intake`):
    its store and claim mode, one operation's policy, and its transactions."""

    store: IdempotencyStore
    claim_mode: Literal["inline", "separate"]
    batch_chunk: int | None

    def admit(
        self, principal: str, op: OperationRequest, owner: object, *, wait: float | None = None
    ) -> OpResult | None: ...

    def release(self, principal: str, op: OperationRequest, owner: object) -> None: ...

    def execute_alone(self, principal: str, op: OperationRequest) -> OpResult: ...

    def apply_or_refuse(self, tx: Tx, principal: str, op: OperationRequest) -> OpResult: ...

    def transact(self, work: Callable[[Tx], T]) -> T: ...

    def notify(self, results: list[OpResult]) -> None: ...


log = logging.getLogger("pigeon.server.intake")


def execute_group(
    intake: BatchHost,
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
    whole group again (``Intake.transact``); should the transaction fail for another
    reason (a bug), the requests are applied again one by one, so the failure stays with
    its own request."""
    if contexts is not None and len(contexts) != len(items):
        raise ValueError(f"{len(items)} requests but {len(contexts)} contexts")
    # Without them, each runs in a copy of this thread's: the same variables.
    runs = [*contexts] if contexts is not None else [copy_context() for _ in items]
    pairs = list(zip(runs, items, strict=True))
    if intake.claim_mode == "separate" or len(items) == 1:
        return [ctx.run(intake.execute_alone, p, op) for ctx, (p, op) in pairs]
    try:
        results = intake.transact(
            lambda tx: [ctx.run(intake.apply_or_refuse, tx, p, op) for ctx, (p, op) in pairs]
        )
    except store_down_errors() as exc:
        return [store_unavailable(exc)] * len(items)  # nothing committed
    except KeyBusy:  # one key held by another process aborted the group: each alone
        return [ctx.run(intake.execute_alone, p, op) for ctx, (p, op) in pairs]
    except Exception:
        log.warning("a group of %d requests failed, applying them one by one", len(items))
        return [ctx.run(intake.execute_alone, p, op) for ctx, (p, op) in pairs]
    intake.notify(results)
    return refresh_all(intake.store, results)


def execute_batch(
    intake: BatchHost, principal: str, ops: list[OperationRequest | OpResult]
) -> list[OpResult]:
    """Apply ops in order, each under its own key and savepoint, in ONE transaction
    (in transactions of ``batch_chunk`` operations when it is set).

    An ``OpResult`` in ``ops`` is an entry refused before parsing (bad key, bad
    JSON): it is reported in place and the batch goes on, as for any permanent
    failure. The batch stops after the first transient result, such as the 409 of
    an operation whose key another request holds right now.
    """
    owner = object()
    admitted: list[OperationRequest] = []
    for i, op in enumerate(ops):
        if isinstance(op, OpResult):
            continue
        refused = intake.admit(principal, op, owner)
        if refused is not None:
            ops = [*ops[:i], refused]  # transient: the batch stops there
            break
        admitted.append(op)
    try:
        return _execute_admitted(intake, principal, ops)
    finally:
        for op in admitted:
            intake.release(principal, op, owner)


def _execute_admitted(
    intake: BatchHost, principal: str, ops: list[OperationRequest | OpResult]
) -> list[OpResult]:
    results: list[OpResult] = []
    chunk = intake.batch_chunk or len(ops) or 1
    # A store-down error (store_down_errors) propagates: the caller answers 503 for what
    # did not commit. The chunks before it committed, and a retry of the batch replays them.
    # Even an empty batch opens its transaction: a dead store answers 503, not 200.
    for start in range(0, len(ops), chunk) or [0]:
        done = _chunk(intake, principal, ops[start : start + chunk])
        intake.notify(done)
        results.extend(done)
        if done and done[-1].transient:
            break
    return refresh_all(intake.store, results)


def _chunk(
    intake: BatchHost, principal: str, ops: list[OperationRequest | OpResult]
) -> list[OpResult]:
    busy_at: list[int] = []

    def apply(tx: Tx) -> list[OpResult]:
        results: list[OpResult] = []
        for i, op in enumerate(ops):
            busy_at[:] = [i]
            result = op if isinstance(op, OpResult) else intake.apply_or_refuse(tx, principal, op)
            results.append(result)
            if result.transient:
                break
        return results

    try:
        return intake.transact(apply)
    except KeyBusy as busy:
        # Another process holds the key of ops[i] and the database aborted the whole
        # transaction: the ops before it run again without it, and it answers 409
        # (transient: the batch stops there, nothing after it overtakes it).
        i = busy_at[0]
        done = _chunk(intake, principal, ops[:i]) if i else []
        if done and done[-1].transient:
            return done
        op = ops[i]
        assert isinstance(op, OperationRequest)
        return [*done, busy_refusal(busy, op)]


def busy_refusal(busy: KeyBusy, op: OperationRequest) -> OpResult:
    """409 for an operation whose key another process holds (its claim's wait ran out)."""
    decision = ClaimDecision(ClaimOutcome.IN_PROGRESS, operation_id=op.operation_id, retry_after=1)
    return claim_refusal(decision, busy.key)
