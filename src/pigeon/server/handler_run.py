"""One claimed operation's run: the handler, its savepoint and the stored response.

``Intake`` claims the key (``pigeon.server.intake``); what happens once the claim is held
lives here. The handler runs in ONE savepoint together with, for a 2xx, the stored
response: a 4xx rolls the handler's writes back and stores the answer under the key; a
5xx or an exception gives the key back and raises ``Failed`` with a transient result, so
the caller rolls the whole operation back and a retry runs again. A key that is not
claimed (a replay, a mismatch, one in progress) is answered by ``refused``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Protocol

from pigeon.core.clock import HLCTimestamp, HybridLogicalClock
from pigeon.core.wire import canonical_json
from pigeon.exceptions import ValidationError
from pigeon.server import testhooks
from pigeon.server.idempotency import Claim, ClaimDecision, IdempotencyStore, StoredResponse
from pigeon.server.identifiers import loggable
from pigeon.server.inflight import InFlight
from pigeon.server.operations import Failed, IntakeContext, OperationRequest, OperationRoute
from pigeon.server.replay import ReplayInfo, claim_refusal, hooked_refusal
from pigeon.server.results import OpResult, lost_claim, normalise, server_error, stored
from pigeon.server.validation import invalid
from pigeon.storage.base import Tx
from pigeon.storage.errors import store_down


class HandlerHost(Protocol):
    """What running a claimed operation reads of the intake that claimed it
    (`pigeon.server.intake.Intake`): its store, clocks, route timings and test hooks."""

    store: IdempotencyStore
    clock: HybridLogicalClock
    inflight: InFlight
    test_hooks: bool

    def now(self) -> float: ...


log = logging.getLogger("pigeon.server.intake")

# Response headers sent with the original answer only, never stored for replays.
NOT_REPLAYED = frozenset({"set-cookie"})


def run_handler(
    intake: HandlerHost,
    tx: Tx,
    claim: Claim,
    route: OperationRoute,
    params: dict[str, Any],
    principal: str,
    op: OperationRequest,
) -> OpResult:
    """Run ``route``'s handler for ``op`` under ``claim``; the result to answer, or
    ``Failed`` (transient: roll the operation back) for a 5xx or an exception."""
    ctx = _context(intake, tx, params, principal, op)
    hooks = op.hooks if intake.test_hooks else None
    started = time.monotonic()
    try:
        # The one savepoint of this operation: the handler's writes and, for a 2xx,
        # the stored response (a claim lost meanwhile takes the writes back with it).
        with tx.savepoint():
            if hooks is not None and hooks.delay_ms:
                time.sleep(hooks.delay)  # in progress, its claim held: the test's gap
            status, body, headers = normalise(route.handler(ctx))
            if hooks is not None and hooks.fail:
                # Quoting the request, as an application's exception may: the 500 must not.
                raise RuntimeError(f"{testhooks.FAIL}: failed after writing, key {op.key}")
            if hooks is not None and hooks.set_cookie is not None:
                headers = (*headers, ("set-cookie", hooks.set_cookie))
            result = OpResult(
                status,
                "" if body is None else canonical_json(body),
                headers,
                committed_key=claim.key,
            )
            if status >= 400:
                raise Failed(result)
            store_answer(intake.store, tx, claim, result)
        intake.inflight.observe(route.template, time.monotonic() - started)
        return result
    except ValidationError as exc:
        # Checked late, by the handler itself: its writes are rolled back with the
        # savepoint and the key is given back, as for the declared checks before the
        # claim, so the corrected request runs under the same key. Nothing is stored.
        intake.store.release(tx, claim)
        raise Failed(invalid(exc)) from None
    except Failed as failed:
        if failed.result.transient:  # the claim was lost: not ours to release
            raise
        if stored(failed.result.status):  # a 4xx: writes rolled back, the answer stored
            store_answer(intake.store, tx, claim, failed.result)
            return failed.result
        intake.store.release(tx, claim)
        raise Failed(
            dataclasses.replace(failed.result, transient=True, committed_key=None)
        ) from None
    except Exception as exc:
        if store_down(exc):  # not this operation's fault: the caller answers 503
            raise
        result = _handler_failed(op, exc)
        intake.store.release(tx, claim)
        raise Failed(result) from exc


def _handler_failed(op: OperationRequest, exc: Exception) -> OpResult:
    """The 500 of a handler that raised: application code, whose message may quote the
    request's data, so the answer gives an error id and the log the type and traceback."""
    message, path = "handler for %s %s failed", loggable(op.path)
    return server_error("handler-failed", "the handler failed", exc, log, message, op.method, path)


def _context(
    intake: HandlerHost, tx: Tx, params: dict[str, Any], principal: str, op: OperationRequest
) -> IntakeContext:
    """What the handler is given; the server clock is moved past the operation's stamp."""
    # Keep the server clock ahead of every operation it applied; the operation's own
    # stamp is what gets recorded (conflict resolution compares operations, not arrivals).
    if op.clock:
        intake.clock.receive(HLCTimestamp.decode(op.clock))
        stamp = op.clock
    else:
        stamp = intake.clock.now().encode()
    return IntakeContext(
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
        now=intake.now(),
    )


def store_answer(store: IdempotencyStore, tx: Tx, claim: Claim, result: OpResult) -> None:
    """Store ``result`` as the key's answer; ``Failed`` (transient) if the claim was lost."""
    # What belongs to this connection, not to the key's answer, is sent now and never
    # replayed: a replay must not set another client's cookie.
    kept = tuple((k, v) for k, v in result.headers if k.lower() not in NOT_REPLAYED)
    answer = StoredResponse(result.status, result.body_text, kept)
    if not store.complete(tx, claim, answer):
        raise Failed(lost_claim(claim.key))


def refused(
    decision: ClaimDecision,
    route: OperationRoute,
    params: dict[str, Any],
    principal: str,
    op: OperationRequest,
) -> OpResult:
    """The answer to a key that was not claimed: its stored response, a mismatch, in
    progress; the route's ``on_replay`` answers its replays with the current state."""
    if route.on_replay is None:
        return claim_refusal(decision, op.key)
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
