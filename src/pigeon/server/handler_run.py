"""One claimed operation's run: the handler, its savepoint and the stored response.

The intake claims the key (``pigeon.server.applying``); what happens once the claim is
held lives here, in a ``HandlerRunner`` made with what it needs. The handler runs in ONE
savepoint together with, for a 2xx, the stored response: a 4xx rolls the handler's writes
back and stores the answer under the key; a 5xx or an exception gives the key back and
raises ``Failed`` with a transient result, so the caller rolls the whole operation back
and a retry runs again. A key that is not claimed (a replay, a mismatch, one in progress)
is answered by ``refused``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pigeon.core.clock import HLCTimestamp, HybridLogicalClock
from pigeon.core.wire import canonical_json
from pigeon.exceptions import ValidationError
from pigeon.server import testhooks
from pigeon.server.idempotency import Claim, ClaimDecision, IdempotencyStore, StoredResponse
from pigeon.server.identifiers import loggable
from pigeon.server.inflight import InFlight
from pigeon.server.operations import Failed, IntakeContext, OperationRequest, RoutedOperation
from pigeon.server.replay import ReplayInfo, claim_refusal, hooked_refusal
from pigeon.server.results import OpResult, lost_claim, normalise, server_error, stored
from pigeon.server.testhooks import TestHooks
from pigeon.server.validation import invalid
from pigeon.storage.base import Tx
from pigeon.storage.errors import store_down

log = logging.getLogger("pigeon.server.intake")

# Response headers sent with the original answer only, never stored for replays.
NOT_REPLAYED = frozenset({"set-cookie"})


@dataclass(frozen=True, slots=True)
class HandlerRunner:
    """Runs claimed operations' handlers, with the intake's ``store`` (the claim's
    answer), its ``clock`` (moved past each operation's stamp), ``timings`` (each route's
    recent duration, which ``Retry-After`` tells), ``now`` (the handler's ``ctx.now``)
    and whether the test hooks are honoured."""

    store: IdempotencyStore
    clock: HybridLogicalClock
    timings: InFlight
    now: Callable[[], float]
    test_hooks: bool = False

    def run(self, tx: Tx, claim: Claim, call: RoutedOperation, *, last: bool = False) -> OpResult:
        """Run ``call``'s handler under ``claim``; the result to answer, or ``Failed``
        (transient: roll the operation back) for a 5xx or an exception. ``last``: the
        transaction commits right after (the single request's), so the stored answer may
        go with the COMMIT (``IdempotencyStore.complete``)."""
        ctx = self._context(tx, call)
        hooks = call.op.hooks if self.test_hooks else None
        started = time.monotonic()
        try:
            # The one savepoint of this operation: the handler's writes and, for a 2xx,
            # the stored response (a claim lost meanwhile takes the writes back with it).
            with tx.savepoint():
                result = _handled(call, ctx, hooks, claim.key)
                if result.status >= 400:
                    raise Failed(result)
                store_answer(self.store, tx, claim, result, last=last)
            took = time.monotonic() - started + call.checked_in
            self.timings.observe(call.route.template, took)
            return result
        except ValidationError as exc:
            # Checked late, by the handler itself: its writes are rolled back with the
            # savepoint and the key is given back, as for the declared checks before the
            # claim, so the corrected request runs under the same key. Nothing is stored.
            self.store.release(tx, claim)
            raise Failed(invalid(exc)) from None
        except Failed as failed:
            return self._refused(tx, claim, failed, last)
        except Exception as exc:
            if store_down(exc):  # not this operation's fault: the caller answers 503
                raise
            result = _handler_failed(call.op, exc)
            self.store.release(tx, claim)
            raise Failed(result) from exc

    def _refused(self, tx: Tx, claim: Claim, failed: Failed, last: bool) -> OpResult:
        """A 4xx the rules store is stored, the handler's writes rolled back; anything
        else gives the key back and is raised again, transient."""
        if failed.result.transient:  # the claim was lost: not ours to release
            raise failed
        if stored(failed.result.status):
            store_answer(self.store, tx, claim, failed.result, last=last)
            return failed.result
        self.store.release(tx, claim)
        raise Failed(
            dataclasses.replace(failed.result, transient=True, committed_key=None)
        ) from None

    def _context(self, tx: Tx, call: RoutedOperation) -> IntakeContext:
        """What the handler is given; the server clock is moved past the operation's stamp."""
        op = call.op
        # Keep the server clock ahead of every operation it applied; the operation's own
        # stamp is what gets recorded (conflict resolution compares operations, not arrivals).
        if op.clock:
            self.clock.receive(HLCTimestamp.decode(op.clock))
            stamp = op.clock
        else:
            stamp = self.clock.now().encode()
        return IntakeContext(
            tx=tx,
            principal=call.principal,
            body=op.body,
            path_params=call.params,
            clock=stamp,
            if_match=op.if_match,
            idempotency_key=op.key,
            operation_id=op.operation_id,
            method=op.method.upper(),
            path=op.path,
            entity=op.entity,
            now=self.now(),
            body_json=call.body_json,
        )


def _handled(
    call: RoutedOperation, ctx: IntakeContext, hooks: TestHooks | None, key: str
) -> OpResult:
    """The handler's answer, to be committed under ``key``, the test hooks applied."""
    if hooks is not None and hooks.delay_ms:
        time.sleep(hooks.delay)  # in progress, its claim held: the test's gap
    status, body, headers = normalise(call.route.handler(ctx))
    if hooks is not None and hooks.fail:
        # Quoting the request, as an application's exception may: the 500 must not.
        raise RuntimeError(f"{testhooks.FAIL}: failed after writing, key {call.op.key}")
    if hooks is not None and hooks.set_cookie is not None:
        headers = (*headers, ("set-cookie", hooks.set_cookie))
    if hooks is not None and hooks.crash == "before-commit":
        testhooks.crash()  # the handler's writes made, nothing committed
    if hooks is not None and hooks.crash == "after-commit":
        testhooks.crash_after_commit(key)
    text = "" if body is None else canonical_json(body)
    return OpResult(status, text, headers, committed_key=key)


def _handler_failed(op: OperationRequest, exc: Exception) -> OpResult:
    """The 500 of a handler that raised: application code, whose message may quote the
    request's data, so the answer gives an error id and the log the type and traceback."""
    message, path = "handler for %s %s failed", loggable(op.path)
    return server_error("handler-failed", "the handler failed", exc, log, message, op.method, path)


def stored_answer(result: OpResult) -> StoredResponse:
    """``result`` as the key's answer is stored. What belongs to this connection, not to
    the key's answer, is sent now and never replayed: a replay must not set another
    client's cookie."""
    kept = tuple((k, v) for k, v in result.headers if k.lower() not in NOT_REPLAYED)
    return StoredResponse(result.status, result.body_text, kept)


def store_answer(
    store: IdempotencyStore, tx: Tx, claim: Claim, result: OpResult, *, last: bool = False
) -> None:
    """Store ``result`` as the key's answer; ``Failed`` (transient) if the claim was lost
    (``ClaimLost`` out of the commit, if ``last`` sent it with the COMMIT)."""
    if not store.complete(tx, claim, stored_answer(result), last=last):
        raise Failed(lost_claim(claim.key))


def refused(decision: ClaimDecision, call: RoutedOperation) -> OpResult:
    """The answer to a key that was not claimed: its stored response, a mismatch, in
    progress; the route's ``on_replay`` answers its replays with the current state."""
    op = call.op
    if call.route.on_replay is None:
        return claim_refusal(decision, op.key)
    info = ReplayInfo(
        principal=call.principal,
        idempotency_key=op.key,
        operation_id=decision.operation_id or op.operation_id,
        method=op.method.upper(),
        path=op.path,
        path_params=call.params,
        body=op.body,
        status=decision.original_status or 0,
        completed_at=decision.completed_at,
    )
    return hooked_refusal(decision, op.key, call.route.on_replay, info)
