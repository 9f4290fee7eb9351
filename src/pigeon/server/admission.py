"""Admission: a duplicate of a request this process is still applying is answered 409 at
once, before it queues for a transaction (`pigeon.server.inflight` keeps who holds what).

Every path of the intake (one request, a group, a batch) admits each operation's key
before its transaction and releases it once that transaction has ended; with
``in_progress_wait`` a duplicate waits up to that long for the original and then meets
its committed answer.
"""

from __future__ import annotations

import asyncio

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
        if refused is None or self.wait == 0:
            return refused
        return await asyncio.to_thread(self.admit, principal, op, owner)

    def release(self, principal: str, op: OperationRequest, owner: object) -> None:
        self.inflight.leave((principal, op.key), owner)

    def _expected(self, op: OperationRequest) -> float:
        """Seconds ``op`` is expected to take: its route's recent mean, plus a test delay."""
        try:
            found = self.routes.match(op.method, op.path)
        except Failed:
            found = None
        mean = 0.0 if found is None else self.inflight.expected(found[0].template)
        return mean + (op.hooks.delay if op.hooks is not None and self.test_hooks else 0.0)
