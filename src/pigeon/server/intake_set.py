"""Set-based batch execution: the operations of a batch whose route declares a set-based
handler (``Intake.add_operation(..., many=...)``) applied with a few multi-row statements
per batch instead of several statements and a savepoint per operation, each answered as
the per-operation path (`pigeon.server.applying`) would answer it.

One chunk of a batch:

1. before its transaction (``plan_set``: no lock is held for it, and a retried transaction
   reuses it), each operation is matched to its route, and one whose route has a set
   handler is checked as the route declares (a refusal is answered in place and stores
   nothing, as on the per-operation path), and the fingerprint of its request taken;
2. the first work of its transaction (``run_set``): ONE call reads the rows of those
   operations' keys (`pigeon.server.idempotency_sets`), and a replay, "already applied"
   or a mismatch is answered from them;
3. in batch order, each run of consecutive operations of one route whose keys are free
   goes to its set handler together (its effects: a multi-row statement per table), and
   their claims are stored with their answers in one more call, each row written once,
   already completed. Every other operation (a route without a set handler, a key taken
   over after its claim expired, a key a second time, one the set handler leaves) runs
   the per-operation way where it stands, after what came before it.

What the set path cannot answer as the per-operation path would — an operation that ends
transient (the batch stops there, and nothing after it may take effect), a key in progress,
a key another transaction claimed after the read (or a row it wrote: a duplicate key), a
set handler that fails — raises
``SetAbandoned``: the chunk's transaction rolls back and the chunk runs the per-operation
way from its start in a new one. The per-operation path stays the reference, the set path
only a faster way to its answers. No savepoint: SQLite journals every page a savepoint's
work changes, ~7% of a batch's CPU.

A set handler ``many(tx, items)`` gets the ``IntakeContext`` of each operation, in
batch order, and returns for each the handler's answer (a 2xx: its writes are made) or
None (not applied: it runs the per-operation way after those applied). What it applies
must not depend on the other items of the call: an item on an entity an earlier item
names is left (None), as is anything it does not handle itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pigeon.core.clock import latest
from pigeon.core.wire import canonical_json
from pigeon.logs import failure
from pigeon.server.applying import Applier
from pigeon.server.handler_run import NOT_REPLAYED, refused
from pigeon.server.idempotency import ClaimOutcome, KeyBusy
from pigeon.server.idempotency_sets import Answer, Ask, Found, SetClaims
from pigeon.server.idempotency_stores import set_claims
from pigeon.server.operations import (
    Failed,
    IntakeContext,
    OperationRequest,
    OperationRoute,
    RoutedOperation,
    routed,
)
from pigeon.server.results import OpResult, normalise, problem_result
from pigeon.storage.base import Tx
from pigeon.storage.errors import duplicate_row, lock_timed_out, store_down

log = logging.getLogger("pigeon.server.intake")

# What a method and path route to: the route and its parameters, none, or the refusal.
_Found = tuple[OperationRoute, dict[str, Any]] | OpResult | None
# The most body text (canonical JSON) one set handler call takes: its multi-row statements'
# parameters hold each body once or twice, each encoded in one call that keeps the event
# loop waiting. A batch of 1,000 16 KiB notes in one call grew the server by 170 MiB and
# held the health probe for 200 ms; a batch of small notes still goes in one call.
SEGMENT_BYTES = 256 << 10


class SetAbandoned(Exception):
    """The set path cannot give its chunk the per-operation path's answers, and gave it
    up: roll the chunk's transaction back, and run the chunk the per-operation way in a
    new one."""


@dataclass(slots=True)
class _Step:
    """One entry of the chunk: answered already (``result``), for a set handler
    (``call`` set) or for the per-operation path (neither)."""

    index: int
    op: OperationRequest | None
    result: OpResult | None = None
    call: RoutedOperation | None = None


@dataclass(frozen=True, slots=True)
class SetPlan:
    """A chunk's steps and the keys to claim at once, made before its transaction: what
    ``run_set`` applies. It touches no database, and ``run_set`` changes nothing of it."""

    claims: SetClaims
    principal: str
    steps: list[_Step]
    asks: list[Ask]


def plan_set(
    applier: Applier, principal: str, ops: Sequence[OperationRequest | OpResult]
) -> SetPlan | None:
    """The chunk ``ops`` planned for ``run_set`` with ``applier`` (the per-operation path,
    its routes, store and handler runner): routed, checked and fingerprinted outside the
    transaction, which on SQLite holds the one write lock that every process of the file
    waits for. None: run it the per-operation way (no operation for a set handler, a
    store without multi-row claims)."""
    if not any(route.many is not None for route in applier.routes):
        return None
    claims = set_claims(applier.store)
    if claims is None:
        return None
    steps = _steps(applier, principal, ops)
    asks = _asks(steps)
    if not asks:
        return None
    return SetPlan(claims, principal, steps, asks)


def commit_set(applier: Applier, plan: SetPlan) -> list[OpResult]:
    """``run_set`` in a transaction of its own (``Applier.transact``), committed.
    ``SetAbandoned``: given up, nothing of it committed. A statement sent with the COMMIT
    (PostgreSQL's claims, `idempotency_stores.PostgresSetClaims`) fails there as it would
    have failed on its own: a key another transaction claimed since the read (a duplicate
    key), or holds uncommitted past the claim's wait. So does one sent with a later
    statement of ``run_set``, which the transaction's end hands on as it is."""
    try:
        return applier.transact(lambda tx: run_set(applier, tx, plan))
    except Exception as exc:
        if duplicate_row(exc) or lock_timed_out(exc):
            raise SetAbandoned from exc
        raise


def run_set(applier: Applier, tx: Tx, plan: SetPlan) -> list[OpResult]:
    """``plan`` applied set-wise in ``tx``, which has done nothing else yet.
    ``SetAbandoned``: an attempt given up, which may have written in ``tx``."""
    try:
        return _Run(applier, plan.claims, tx, plan.principal, plan.steps).go(plan.asks)
    except SetAbandoned:
        raise
    except KeyBusy:
        raise SetAbandoned from None
    except Exception as exc:
        if store_down(exc):
            raise
        if duplicate_row(exc):  # another transaction wrote a key or a row since the read
            raise SetAbandoned from exc
        failure(log, "a set-based batch failed; it runs one operation at a time", exc=exc)
        raise SetAbandoned from exc


def _steps(
    applier: Applier, principal: str, ops: Sequence[OperationRequest | OpResult]
) -> list[_Step]:
    steps: list[_Step] = []
    routed: dict[tuple[str, str], _Found] = {}  # a batch's entries share few paths
    for i, op in enumerate(ops):
        if isinstance(op, OpResult):
            steps.append(_Step(i, None, result=op))
            if op.transient:  # the batch stops there
                break
            continue
        where = (op.method, op.path)
        if where not in routed:
            routed[where] = _route(applier, op)
        steps.append(_step(applier, principal, i, op, routed[where]))
    return steps


def _route(applier: Applier, op: OperationRequest) -> _Found:
    try:
        return applier.routes.match(op.method, op.path)
    except Failed as failed:  # the path is another method's: 405
        return failed.result


def _step(applier: Applier, principal: str, i: int, op: OperationRequest, found: _Found) -> _Step:
    """``op`` routed, and checked as the per-operation path does before any claim when its
    route has a set handler (any other is checked where it runs, the per-operation way)."""
    if isinstance(found, OpResult):
        return _Step(i, op, result=found)
    if found is None:
        detail = f"no operation {op.method} {op.path}"
        return _Step(i, op, result=problem_result(404, "no-such-operation", "Not found", detail))
    route = found[0]
    if route.many is None or (op.hooks is not None and applier.runner.test_hooks):
        return _Step(i, op)
    params = dict(found[1])
    checked_in = 0.0
    if route.check is not None:
        refusal, checked_in = route.check.timed(op.body, params)
        if refusal is not None:
            return _Step(i, op, result=refusal)
    return _Step(i, op, call=routed(principal, op, route, params, checked_in))


def _asks(steps: list[_Step]) -> list[Ask]:
    """The keys to claim at once: each set step's whose key no step before it claims (a
    key's later steps run the per-operation way, where they meet its first one's answer)."""
    seen: set[str] = set()
    asks: list[Ask] = []
    for step in steps:
        op = step.op
        if op is None or step.result is not None:
            continue
        if op.key in seen:
            step.call = None
            continue
        seen.add(op.key)
        if step.call is not None:
            fingerprint = step.call.fingerprint
            asks.append(Ask(op.key, fingerprint, op.method.upper(), op.path, op.operation_id))
    return asks


# An operation of a segment (its key free): its call, its index in the chunk, its ask.
_Item = tuple[RoutedOperation, int, Ask]


class _Run:
    """One attempt at a chunk: its keys read, its steps walked in order, its claims stored
    with their answers."""

    def __init__(
        self, applier: Applier, claims: SetClaims, tx: Tx, principal: str, steps: list[_Step]
    ) -> None:
        self.applier = applier
        self.claims = claims
        self.tx = tx
        self.principal = principal
        self.steps = steps
        self.results: list[OpResult | None] = [None] * len(steps)
        self.claimed = 0.0  # when the keys were read: their claims' time

    def go(self, asks: list[Ask]) -> list[OpResult]:
        found = self.claims.read_many(self.tx, self.principal, asks)
        self.claimed = found.now
        segment: list[_Item] = []
        size = 0  # of the segment's bodies
        for step in self.steps:
            if step.result is not None:
                self.results[step.index] = step.result
                continue
            call = step.call
            if call is not None:
                ask = found.free.get(call.op.key)
                if ask is not None:
                    if segment and (
                        segment[0][0].route is not call.route or size + call.size > SEGMENT_BYTES
                    ):
                        self._flush(segment)
                        size = 0
                    segment.append((call, step.index, ask))
                    size += call.size
                    continue
                if self._answer_held(call, step.index, found):
                    continue
            self._flush(segment)
            size = 0
            self._per_operation(step)
        self._flush(segment)
        done = [r for r in self.results if r is not None]
        assert len(done) == len(self.steps)
        return done

    def _answer_held(self, call: RoutedOperation, index: int, found: Found) -> bool:
        """Answer an operation whose key was used before from its row, as the one-key
        claim would; False where it is taken over (the per-operation way runs it)."""
        decision = found.held.get(call.op.key)
        if decision is None:
            return False
        if decision.outcome is ClaimOutcome.IN_PROGRESS:
            raise SetAbandoned  # transient: the per-operation way stops the batch there
        self.results[index] = refused(decision, call)
        return True

    def _per_operation(self, step: _Step) -> None:
        assert step.op is not None
        self._apply(step.op, step.index)

    def _apply(self, op: OperationRequest, index: int) -> None:
        """``op`` the per-operation way: its own claim, its route's own handler."""
        result = self.applier.apply(self.tx, self.principal, op)
        if result.transient:
            raise SetAbandoned
        self.results[index] = result

    def _flush(self, segment: list[_Item]) -> None:
        """The set handler over ``segment`` (operations of one route whose keys are free),
        their claims stored with the answers it gives in one statement, and the operations
        it leaves run one by one."""
        if not segment:
            return
        route = segment[0][0].route
        assert route.many is not None
        started = time.monotonic()
        outs = route.many(self.tx, self._contexts(segment))
        if len(outs) != len(segment):
            raise TypeError(f"a set handler answered {len(outs)} of {len(segment)} items")
        answers: list[Answer] = []
        left: list[tuple[RoutedOperation, int]] = []
        for (call, index, ask), out in zip(segment, outs, strict=True):
            if out is None:
                left.append((call, index))
                continue
            result = self.results[index] = _applied(out, ask.key)
            kept = [[k, v] for k, v in result.headers if k not in NOT_REPLAYED]
            answers.append((ask, result.status, kept, result.body_text))
        stored = self.claims.store_many(self.tx, self.principal, answers, self.claimed)
        if stored != len(answers):
            raise SetAbandoned  # another transaction claimed a key: the one-key way says how
        if answers:
            checks = sum(call.checked_in for call, _, _ in segment)
            mean = (time.monotonic() - started + checks) / len(answers)
            self.applier.runner.timings.observe(route.template, mean)
        for call, index in left:  # a key still free: claimed the one-key way
            self._apply(call.op, index)
        segment.clear()

    def _contexts(self, segment: list[_Item]) -> list[IntakeContext]:
        """What the route's handler would be given for each (``HandlerRunner``), the
        server clock moved past the latest stamp among them (so past each)."""
        runner, tx, principal = self.applier.runner, self.tx, self.principal
        clock, now = runner.clock, runner.now()
        stamps = [c.op.clock for c, _, _ in segment if c.op.clock]
        if stamps:
            clock.receive(latest(stamps))
        # The server's own stamps for the operations that came without one, in order.
        own = iter(clock.stamp_texts(len(segment) - len(stamps)))
        contexts = []
        for call, _, _ in segment:
            op = call.op
            # In the fields' order (tx, principal, body, path_params, clock, if_match,
            # idempotency_key, operation_id, method, path, entity, now, body_json): by
            # keyword, the call cost 2.5 times as much, ~0.3 us an operation.
            contexts.append(
                IntakeContext(
                    tx, principal, op.body, call.params, op.clock or next(own),
                    op.if_match, op.key, op.operation_id, op.method.upper(), op.path,
                    op.entity, now, call.body_json,
                )
            )  # fmt: skip
        return contexts


def _applied(out: Any, key: str) -> OpResult:
    """A set handler's answer to one item it applied: a 2xx, as the route's handler gives."""
    status, body, headers = normalise(out)
    if not 200 <= status < 300:
        raise TypeError(f"a set handler answers only what it applied (a 2xx), not {status}")
    text = "" if body is None else canonical_json(body)
    return OpResult(status, text, headers, committed_key=key)
