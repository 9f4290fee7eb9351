"""Admission: a duplicate of a request this process is still applying is answered 409 at
once, before it queues for a transaction (`pigeon.server.inflight` keeps who holds what).

Every path of the intake (one request, a group, a batch) admits each operation's key
before its transaction and releases it once that transaction has ended; with
``in_progress_wait`` a duplicate waits up to that long for the original and then meets
its committed answer.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from pigeon.server.idempotency import ClaimDecision, ClaimOutcome
from pigeon.server.inflight import InFlight
from pigeon.server.operations import Failed, OperationRequest, Routes
from pigeon.server.options import IntakeOptions
from pigeon.server.replay import claim_refusal
from pigeon.server.results import OpResult


class Admission:
    """Holds each admitted (principal, key) in ``inflight`` for its owner; ``routes``
    tell how long an operation is expected to take (its ``Retry-After``)."""

    def __init__(self, inflight: InFlight, routes: Routes, options: IntakeOptions) -> None:
        self.inflight = inflight
        self.routes = routes
        self.wait = options.in_progress_wait
        self.test_hooks = options.test_hooks

    def admit(
        self, principal: str, op: OperationRequest, owner: object, *, wait: float | None = None
    ) -> OpResult | None:
        """Hold ``op``'s key in this process for ``owner`` (None), or the 409 that answers
        it because another request holds it still after ``wait`` (``in_progress_wait``)
        seconds. Whoever is admitted calls ``release`` once its transaction has ended."""
        wait = self.wait if wait is None else wait
        slot = (principal, op.key)
        expected = functools.partial(self._expected, op)
        holder = self.inflight.admit(slot, owner, op.operation_id, expected, wait)
        if holder is None:
            return None
        retry_after = holder.retry_after(self.inflight.now())
        decision = ClaimDecision(
            ClaimOutcome.IN_PROGRESS, operation_id=holder.operation_id, retry_after=retry_after
        )
        return claim_refusal(decision, op.key)

    def admit_batch(
        self, principal: str, ops: Sequence[OperationRequest | OpResult], owner: object
    ) -> tuple[list[OperationRequest], list[OperationRequest | OpResult]]:
        """``admit`` each operation of a batch in order (one lock for all of them, unless
        another request holds a key: that one waits as ``admit`` does): the operations
        held, and the batch to run, cut after the first refused, its 409 in its place."""
        # A key of the batch is released when the whole batch has ended: that is its
        # Retry-After (worked out only if a duplicate asks).
        expected = functools.partial(self._expected_all, ops)
        wanted = [(i, op) for i, op in enumerate(ops) if not isinstance(op, OpResult)]
        slots = [((principal, op.key), op.operation_id) for _, op in wanted]
        admitted: list[OperationRequest] = []
        start = 0
        while start < len(wanted):
            entered, holder = self.inflight.enter_all(slots[start:], owner, expected)
            admitted.extend(op for _, op in wanted[start : start + entered])
            start += entered
            if holder is None:
                break
            i, op = wanted[start]
            refused = self.admit(principal, op, owner)  # waits for the other holder
            if refused is not None:
                return admitted, [*ops[:i], refused]  # transient: the batch stops there
            admitted.append(op)
            start += 1
        return admitted, list(ops)

    async def admit_async(
        self, principal: str, op: OperationRequest, owner: object
    ) -> OpResult | None:
        """``admit`` for the event loop: a wait, if any, happens in a worker thread."""
        refused = self.admit(principal, op, owner, wait=0)
        if refused is None or self.wait == 0:
            return refused
        return await asyncio.to_thread(self.admit, principal, op, owner)

    def release(self, principal: str, op: OperationRequest, owner: object) -> None:
        self.inflight.leave((principal, op.key), owner)

    def release_all(self, principal: str, ops: Sequence[OperationRequest], owner: object) -> None:
        self.inflight.leave_all([(principal, op.key) for op in ops], owner)

    def measured(self, ops: Sequence[OperationRequest | OpResult]) -> float | None:
        """Seconds ``ops`` are expected to take in all, by their routes' recent means;
        None if a route of theirs has never run (nothing is known of it yet)."""
        total = 0.0
        means: dict[tuple[str, str], float | None] = {}
        for op in ops:
            if isinstance(op, OpResult):
                continue
            where = (op.method, op.path)  # one route lookup for a batch of creates
            if where not in means:
                means[where] = self._mean(op)
            mean = means[where]
            if mean is None:
                return None
            total += mean + self._delay(op)
        return total

    def _expected_all(self, ops: Sequence[OperationRequest | OpResult]) -> float:
        return sum(self._expected(op) for op in ops if not isinstance(op, OpResult))

    def _expected(self, op: OperationRequest) -> float:
        """Seconds ``op`` is expected to take: its route's recent mean, plus a test delay."""
        return (self._mean(op) or 0.0) + self._delay(op)

    def _mean(self, op: OperationRequest) -> float | None:
        """The recent mean duration of ``op``'s route: None before its first run, 0 where
        no route takes ``op`` (it is refused before any handler runs)."""
        try:
            found = self.routes.match(op.method, op.path)
        except Failed:
            return 0.0
        return 0.0 if found is None else self.inflight.measured(found[0].template)

    def _delay(self, op: OperationRequest) -> float:
        return op.hooks.delay if op.hooks is not None and self.test_hooks else 0.0
