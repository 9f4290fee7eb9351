"""The intake's paths for many operations at once: a batch (one client's operations in
order, in one transaction, stopping at the first transient result) and a group
(independent single requests that arrived together, committed together, each answered
as if alone). The policy of one operation (claim, run, store) is the ``Applier``'s
(`pigeon.server.applying`), who holds a key in this process the ``Admission``'s."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import Context, copy_context

from pigeon.server import intake_set
from pigeon.server.admission import Admission
from pigeon.server.applying import Applier, busy_refusal
from pigeon.server.idempotency import KeyBusy
from pigeon.server.operations import OperationRequest
from pigeon.server.replay import refresh_all
from pigeon.server.results import OpResult, store_unavailable
from pigeon.storage.base import Tx
from pigeon.storage.errors import store_down_errors

log = logging.getLogger("pigeon.server.intake")


def execute_group(
    applier: Applier,
    items: Sequence[tuple[str, OperationRequest]],
    contexts: Sequence[Context] | None = None,
) -> list[OpResult]:
    """``commit_group``, then ``Applier.finish``."""
    return applier.finish(commit_group(applier, items, contexts))


def commit_group(
    applier: Applier,
    items: Sequence[tuple[str, OperationRequest]],
    contexts: Sequence[Context] | None = None,
) -> list[OpResult]:
    """Apply independent single-operation requests that arrived together, in ONE
    transaction (group commit: one fsync for all of them); the caller finishes and
    answers them only after this returns, so no answer ever precedes its commit.

    ``contexts``: each request's own context variables (what its middleware set, such
    as the sending device's clock), in which its operation is applied; without them
    every request of the group would see those of the thread running the group.

    Unlike a batch, nothing here stops at a transient failure: each operation's
    savepoint and claim are already undone when its result says "retry", so every
    result is what ``execute`` alone would have answered. A deadlock victim runs the
    whole group again (``Applier.transact``); should the transaction fail for another
    reason (a bug), the requests are applied again one by one, so the failure stays with
    its own request."""
    if contexts is not None and len(contexts) != len(items):
        raise ValueError(f"{len(items)} requests but {len(contexts)} contexts")
    # Without them, each runs in a copy of this thread's: the same variables.
    runs = [*contexts] if contexts is not None else [copy_context() for _ in items]
    pairs = list(zip(runs, items, strict=True))
    alone = applier.commit_safely
    if applier.claim_mode == "separate" or len(items) == 1:
        return [ctx.run(alone, p, op) for ctx, (p, op) in pairs]
    try:
        results = applier.transact(
            lambda tx: [ctx.run(applier.apply, tx, p, op) for ctx, (p, op) in pairs]
        )
    except store_down_errors() as exc:
        return [store_unavailable(exc)] * len(items)  # nothing committed
    except KeyBusy:  # one key held by another process aborted the group: each alone
        return [ctx.run(alone, p, op) for ctx, (p, op) in pairs]
    except Exception:
        log.warning("a group of %d requests failed, applying them one by one", len(items))
        return [ctx.run(alone, p, op) for ctx, (p, op) in pairs]
    return results


def execute_batch(
    applier: Applier,
    admission: Admission,
    principal: str,
    ops: list[OperationRequest | OpResult],
) -> list[OpResult]:
    """Apply ops in order, each under its own key and savepoint, in ONE transaction
    (in transactions of ``batch_chunk`` operations when it is set).

    An ``OpResult`` in ``ops`` is an entry refused before parsing (bad key, bad
    JSON): it is reported in place and the batch goes on, as for any permanent
    failure. The batch stops after the first transient result, such as the 409 of
    an operation whose key another request holds right now.
    """
    with admitted_batch(admission, principal, ops) as admitted:
        results: list[OpResult] = []
        chunk = applier.batch_chunk or len(admitted) or 1
        # A store-down error (store_down_errors) propagates: the caller answers 503 for
        # what did not commit. The chunks before it committed (after_commit heard them),
        # and a retry of the batch replays them. Even an empty batch opens its
        # transaction: a dead store answers 503, not 200.
        for start in range(0, len(admitted), chunk) or [0]:
            done = _chunk(applier, principal, admitted[start : start + chunk])
            applier.committed(done)
            results.extend(done)
            if done and done[-1].transient:
                break
        return refresh_all(applier.store, results)


@contextmanager
def admitted_batch(
    admission: Admission, principal: str, ops: list[OperationRequest | OpResult]
) -> Iterator[list[OperationRequest | OpResult]]:
    """``ops`` admitted for the block: a duplicate of one still in flight in this process
    in its place as a refusal (``Admission.admit_batch``)."""
    owner = object()
    admitted, ops = admission.admit_batch(principal, ops, owner)
    try:
        yield ops
    finally:
        admission.release_all(principal, admitted, owner)


def commits_once(applier: Applier, size: int) -> bool:
    """Does a batch of ``size`` operations commit in one transaction (no ``batch_chunk``
    below it)?"""
    return not applier.batch_chunk or size <= applier.batch_chunk


def commit_batch(
    applier: Applier, principal: str, ops: list[OperationRequest | OpResult]
) -> list[OpResult]:
    """``execute_batch`` of ``ops`` admitted already, which ``commits_once``, up to its
    commit: ``Applier.finish`` is the caller's."""
    if not commits_once(applier, len(ops)):
        raise ValueError(f"{len(ops)} operations commit in chunks of {applier.batch_chunk}")
    return _chunk(applier, principal, ops)


def _chunk(
    applier: Applier, principal: str, ops: list[OperationRequest | OpResult]
) -> list[OpResult]:
    busy_at: list[int] = []

    def one_by_one(tx: Tx) -> list[OpResult]:
        results: list[OpResult] = []
        for i, op in enumerate(ops):
            busy_at[:] = [i]
            result = op if isinstance(op, OpResult) else applier.apply(tx, principal, op)
            results.append(result)
            if result.transient:
                break
        return results

    plan = intake_set.plan_set(applier, principal, ops)  # None: one at a time
    try:
        if plan is not None:
            try:
                return intake_set.commit_set(applier, plan)
            except intake_set.SetAbandoned:  # rolled back: the chunk anew, one at a time
                pass
        return applier.transact(one_by_one)
    except KeyBusy as busy:
        # Another process holds the key of ops[i] and the database aborted the whole
        # transaction: the ops before it run again without it, and it answers 409
        # (transient: the batch stops there, nothing after it overtakes it).
        i = busy_at[0]
        done = _chunk(applier, principal, ops[:i]) if i else []
        if done and done[-1].transient:
            return done
        op = ops[i]
        assert isinstance(op, OperationRequest)
        return [*done, busy_refusal(busy, op)]
