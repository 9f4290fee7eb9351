"""The intake's rules inside the application's own transaction, for any framework.

A web framework's integration (`pigeon.integrations.fastapi`, and others beside it) hands
``Claims.run`` three things: the request as the intake reads it (an ``OperationRequest``:
key, method, path, JSON body), a ``UnitOfWork`` over the transaction of the application's
own connection, and the handler. Then, in that one transaction:

1. the key is claimed (``IdempotencyStore.claim``: the fingerprint, the principal's scope,
   a replay, 409 in progress, 422 for another request under the key);
2. the handler writes with the application's ORM and defers pigeon's jobs there;
3. a 2xx is stored under the key and the transaction commits: the effect, its jobs and
   the answer a retry gets are one commit, so a crash leaves all of them or none. The
   answer is the transaction's last statement (``LastStatement``), which a unit of work
   may send in one round trip with its COMMIT (psycopg's pipeline mode).

The test hooks of a request (``pigeon serve --test-hooks``, read only where the app
turned them on: `pigeon.server.testhooks`) are honoured as the intake honours them: a
delay after the claim, a failure after the handler wrote, a Set-Cookie that is never
stored, the process killed before or after the commit.

Outcomes follow the intake (`pigeon.server.handler_run`): a 4xx the rules store rolls the
handler's writes back and is stored under the key, in a short transaction of its own (no
savepoint on the way of a 2xx); a 5xx, an exception, 401/403/408/425/429 or a
``ValidationError`` roll everything back, the claim too, so the key is free for the retry.
A duplicate of a request this process is still running is answered 409 at once
(`pigeon.server.inflight`); across processes the claim's bounded wait answers it.

The application lets pigeon end the transaction: it commits after storing the answer and
rolls back on every other outcome. The handler must not commit itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pigeon.exceptions import ConfigurationError, ValidationError
from pigeon.server import testhooks
from pigeon.server.applying import busy_refusal
from pigeon.server.fingerprint import fingerprint
from pigeon.server.handler_run import stored_answer
from pigeon.server.idempotency import (
    CLAIM_WAIT,
    Claim,
    ClaimDecision,
    ClaimOutcome,
    IdempotencyPolicy,
    KeyBusy,
    SqlIdempotencyStore,
)
from pigeon.server.inflight import InFlight
from pigeon.server.operations import Failed, OperationRequest
from pigeon.server.options import ServerOptions
from pigeon.server.replay import claim_refusal
from pigeon.server.results import OpResult, lost_claim, store_unavailable, stored
from pigeon.server.validation import invalid
from pigeon.storage.base import Tx
from pigeon.storage.errors import store_down

T = TypeVar("T")


def _NONE() -> float:
    """How long an operation is expected to take: not known here (Retry-After: 1)."""
    return 0.0


__all__ = ["AsyncUnitOfWork", "Claims", "LastStatement", "UnitOfWork"]

COMPLETE_LAST = "claim_complete_last"


@dataclass(frozen=True, slots=True)
class LastStatement:
    """The statement that ends a transaction right before its COMMIT: the key's stored
    answer (the named query ``claim_complete_last``). A unit of work either sends it with
    the COMMIT in one round trip, which PostgreSQL's text of it allows (it fails when it
    stores nothing, and the COMMIT behind it is skipped), or ``execute``s it first."""

    name: str
    params: Mapping[str, Any]
    key: str

    def execute(self, tx: Tx) -> None:
        """Run it in ``tx``, and refuse to go on if it stored nothing (a lost claim)."""
        if tx.fetchone(self.name, self.params) is None:
            raise Failed(lost_claim(self.key))


Finish = Callable[[Tx], LastStatement]


class UnitOfWork(Protocol):
    """The application's open transaction, as the claims need it."""

    def run(self, work: Callable[[Tx], T]) -> T:
        """``work`` with pigeon's ``Tx`` over the transaction (begun here if need be)."""
        ...

    def commit(self, last: Finish) -> None:
        """Commit, ``last``'s statement (made over the transaction's ``Tx``) the last one
        before the COMMIT."""
        ...

    def rollback(self) -> None: ...


class AsyncUnitOfWork(Protocol):
    """``UnitOfWork`` of an asyncio session: ``work`` runs synchronously (SQLAlchemy's
    ``AsyncSession.run_sync``)."""

    async def run(self, work: Callable[[Tx], T]) -> T: ...

    async def commit(self, last: Finish) -> None: ...

    async def rollback(self) -> None: ...


@dataclass
class Claims:
    """The keys of one application: its policy, its clock and its requests in flight.

    ``after_commit(keys)`` is called right after a commit that stored ``keys``' answers,
    before anyone is answered (the crash tests die in exactly that gap)."""

    policy: IdempotencyPolicy = field(default_factory=IdempotencyPolicy)
    now: Callable[[], float] = time.time
    claim_wait: float = CLAIM_WAIT
    after_commit: Callable[[list[str]], None] | None = None

    def __post_init__(self) -> None:
        self.store = SqlIdempotencyStore(self.policy, now=self.now, claim_wait=self.claim_wait)
        self.inflight = InFlight()

    # -- the steps, each in a transaction it is handed ----------------------------------

    def admit(self, principal: str, op: OperationRequest, owner: object) -> OpResult | None:
        """Hold ``op``'s key in this process, or the 409 of a duplicate still running."""
        holder = self.inflight.admit((principal, op.key), owner, op.operation_id, _NONE, 0.0)
        if holder is None:
            return None
        retry_after = holder.retry_after(self.inflight.now())
        decision = ClaimDecision(
            ClaimOutcome.IN_PROGRESS, operation_id=holder.operation_id, retry_after=retry_after
        )
        return claim_refusal(decision, op.key)

    def release(self, principal: str, op: OperationRequest, owner: object) -> None:
        self.inflight.leave((principal, op.key), owner)

    def claim(self, tx: Tx, principal: str, op: OperationRequest) -> Claim | OpResult:
        """The key for ``op``, or the answer that refuses it (roll ``tx`` back then: on
        PostgreSQL a claim whose wait ran out has aborted it)."""
        try:
            decision = self.store.claim(
                tx,
                principal=principal,
                key=op.key,
                fingerprint=fingerprint(op.method, op.path, op.body),
                method=op.method.upper(),
                path=op.path,
                operation_id=op.operation_id,
            )
        except KeyBusy as busy:
            return busy_refusal(busy, op)
        if decision.claim is None:
            return claim_refusal(decision, op.key)
        return decision.claim

    def keep(self, claim: Claim, result: OpResult) -> Finish:
        """What stores ``result`` as the key's answer (Set-Cookie is never stored), the
        transaction's last statement."""

        def last(tx: Tx) -> LastStatement:
            params = self.store.completion(tx.cipher, claim, stored_answer(result))
            return LastStatement(COMPLETE_LAST, params, claim.key)

        return last

    def notify(self, key: str) -> None:
        """``key``'s answer committed, no one answered yet."""
        if self.after_commit is not None:
            self.after_commit([key])
        testhooks.crash_if_due((key,))

    # -- a whole request -----------------------------------------------------------------

    def run(
        self,
        uow: UnitOfWork,
        principal: str,
        op: OperationRequest,
        handler: Callable[[], OpResult],
    ) -> OpResult:
        """Claim, run ``handler``, store and commit; or the refusal, rolled back. An
        exception of the handler rolls everything back and propagates."""
        owner = object()
        refused = self.admit(principal, op, owner)
        if refused is not None:
            return refused
        try:
            return self._run(uow, principal, op, handler)
        except Exception as exc:
            if not store_down(exc):
                raise
            with contextlib.suppress(Exception):
                uow.rollback()
            return store_unavailable(exc)
        finally:
            self.release(principal, op, owner)

    def _run(
        self,
        uow: UnitOfWork,
        principal: str,
        op: OperationRequest,
        handler: Callable[[], OpResult],
    ) -> OpResult:
        claimed = uow.run(lambda tx: self.claim(tx, principal, op))
        if isinstance(claimed, OpResult):
            uow.rollback()
            return claimed
        try:
            if op.hooks is not None and op.hooks.delay_ms:
                time.sleep(op.hooks.delay)  # in progress, its claim held: the test's gap
            result = _hooked(op, handler())
            if result.status < 400:
                uow.commit(self.keep(claimed, result))
                self.notify(claimed.key)
                return result
        except ValidationError as exc:  # checked late: nothing stored, the key free
            uow.rollback()
            return invalid(exc)
        except BaseException:  # the handler's, or its writes' at the commit
            with contextlib.suppress(Exception):
                uow.rollback()
            raise
        uow.rollback()
        if not stored(result.status):  # a 5xx, or "not now": the key is free
            return result
        # A 4xx the rules store, its handler's writes rolled back: stored under the key in
        # a transaction of its own (a duplicate that took the key meanwhile answers).
        again = uow.run(lambda tx: self.claim(tx, principal, op))
        if isinstance(again, OpResult):
            uow.rollback()
            return again
        uow.commit(self.keep(again, result))
        self.notify(again.key)
        return result

    async def run_async(
        self,
        uow: AsyncUnitOfWork,
        principal: str,
        op: OperationRequest,
        handler: Callable[[], Awaitable[OpResult]],
    ) -> OpResult:
        """``run`` for an asyncio session and handler."""
        owner = object()
        refused = self.admit(principal, op, owner)
        if refused is not None:
            return refused
        try:
            return await self._run_async(uow, principal, op, handler)
        except Exception as exc:
            if not store_down(exc):
                raise
            with contextlib.suppress(Exception):
                await uow.rollback()
            return store_unavailable(exc)
        finally:
            self.release(principal, op, owner)

    async def _run_async(
        self,
        uow: AsyncUnitOfWork,
        principal: str,
        op: OperationRequest,
        handler: Callable[[], Awaitable[OpResult]],
    ) -> OpResult:
        claimed = await uow.run(lambda tx: self.claim(tx, principal, op))
        if isinstance(claimed, OpResult):
            await uow.rollback()
            return claimed
        try:
            if op.hooks is not None and op.hooks.delay_ms:
                await asyncio.sleep(op.hooks.delay)
            result = _hooked(op, await handler())
            if result.status < 400:
                await uow.commit(self.keep(claimed, result))
                self.notify(claimed.key)
                return result
        except ValidationError as exc:
            await uow.rollback()
            return invalid(exc)
        except BaseException:
            with contextlib.suppress(Exception):
                await uow.rollback()
            raise
        await uow.rollback()
        if not stored(result.status):
            return result
        again = await uow.run(lambda tx: self.claim(tx, principal, op))
        if isinstance(again, OpResult):
            await uow.rollback()
            return again
        await uow.commit(self.keep(again, result))
        self.notify(again.key)
        return result


def refuse_unheeded_by_apps(options: ServerOptions, who: str) -> None:
    """Refuse (ConfigurationError naming the field) the options that an application whose
    key is claimed in its own transaction cannot heed, ``who`` (an app's route or view)
    being what claims it: the separate claim mode; a wait for a duplicate in progress,
    which it answers 409 at once; SQLite's ``--durability normal``, a setting of pigeon's
    own connections, where the app writes through its own."""
    intake = options.intake
    if intake.claim_mode != "inline":
        raise ConfigurationError(
            f"{who} claims its key in the handler's own transaction: it does not heed "
            "--claim-mode separate (claim_mode 'separate')",
            field="claim_mode",
        )
    if intake.in_progress_wait:
        raise ConfigurationError(
            f"{who} answers a duplicate of a request in progress 409 at once: it does not "
            "heed --in-progress-wait (in_progress_wait)",
            field="in_progress_wait",
        )
    database = options.database
    if database is not None and not database.is_postgres and database.durability != "full":
        raise ConfigurationError(
            f"{who} writes through the application's own connections: it does not heed "
            "--durability normal (set PRAGMA synchronous on those connections instead)",
            field="durability",
        )


def _hooked(op: OperationRequest, result: OpResult) -> OpResult:
    """The handler's ``result`` with the test hooks ``op`` carries applied (as
    `pigeon.server.handler_run` applies them), before anything is stored or committed."""
    hooks = op.hooks
    if hooks is None:
        return result
    if hooks.fail:  # after the handler wrote: everything rolls back, the key is free
        raise RuntimeError(f"{testhooks.FAIL}: failed after writing, key {op.key}")
    if hooks.set_cookie is not None:  # sent with this answer, never stored with it
        result = dataclasses.replace(
            result, headers=(*result.headers, ("set-cookie", hooks.set_cookie))
        )
    if hooks.crash == "before-commit":
        testhooks.crash()  # the handler's writes made, nothing committed
    if hooks.crash == "after-commit":
        testhooks.crash_after_commit(op.key)  # in notify, once it committed
    return result
