"""What a request meets when its key was used before: a replay, "already applied", "in
progress" or "reused for another request", and the per-route replay hook.

A replay answers the stored status and headers with ``Idempotent-Replayed: true``. A
route registered with ``on_replay`` answers a replay with the *current, approved* state
instead of the stored body: ``on_replay(tx, stored_body, info)`` returns the body to
send (``None`` keeps the stored one). The hook runs after the transaction that decided
the replay has ended, in a transaction of its own that the database itself holds
read-only (SQLite ``query_only``, PostgreSQL ``SET TRANSACTION READ ONLY``): it can
never re-run the handler, nor clear or rewrite the stored claim and response. If it
fails, or the store is gone by then, the stored body is sent: the effect is committed,
so the original answer is still a true one.

The status stays the stored one. For an acceptance that is ``202``, whose body
RFC 9110 (15.3.3) says "ought to describe the request's current status": exactly what a
hook returns. Clients classify by status, so a retry is never a different class of
answer than the first attempt.

After the stored response is purged the key answers "already applied" with the original
operation id and status, and the hook is called once more, with ``stored_body=None`` and
``info.response_kept`` False: what it returns is sent as that answer's ``current``. That
is how a conflict refused long ago (412, 409) still reaches the client with the version
and data it needs to resolve: without them its resolver has no remote side and can only
hold the conflict for the user. A hook returns None where it has nothing to add.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pigeon.core.wire import REPLAYED, canonical_json
from pigeon.logs import failure
from pigeon.server.idempotency import ClaimDecision, ClaimOutcome, IdempotencyStore
from pigeon.server.results import OpResult, problem_result
from pigeon.storage.base import Tx

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplayInfo:
    """The replayed request and its stored outcome, as a replay hook sees them."""

    principal: str
    idempotency_key: str
    operation_id: str  # the original operation's id
    method: str
    path: str
    path_params: Mapping[str, Any]
    body: Any  # the request body (identical to the original's: same fingerprint)
    status: int  # the original status (a replay keeps it; "already applied" keeps a 4xx)
    completed_at: float | None
    # False for "already applied": the stored response is purged, the hook's answer goes
    # under ``current`` (a replay whose stored body was empty also gets None as it).
    response_kept: bool = True


ReplayHook = Callable[[Tx, Any, ReplayInfo], Any]


def claim_refusal(decision: ClaimDecision, key: str) -> OpResult:
    """The answer to a request that must not run (``hooked_refusal`` adds a route's hook)."""
    replayed = ((REPLAYED.lower(), "true"),)
    if decision.outcome is ClaimOutcome.REPLAY:
        assert decision.response is not None
        response = decision.response
        headers = response.headers + replayed
        return OpResult(response.status, response.body, headers, replayed=True)
    if decision.outcome is ClaimOutcome.ALREADY_APPLIED:
        body = {
            "status": "already_applied",
            "operation_id": decision.operation_id,
            "idempotency_key": key,
            "original_status": decision.original_status,
            "completed_at": decision.completed_at,
        }
        # A refusal stays a refusal: answering 200 for a key whose operation was refused
        # (409/412/422...) would let a client record as delivered what never took effect.
        original = decision.original_status or 200
        status = original if original >= 400 else 200
        return OpResult(status, canonical_json(body), replayed, replayed=True)
    if decision.outcome is ClaimOutcome.IN_PROGRESS:
        result = problem_result(
            409,
            "key-in-progress",
            "Request in progress",
            "a request with this Idempotency-Key is still running; "
            f"retry in {decision.retry_after} s",
            operation_id=decision.operation_id,
        )
        return dataclasses.replace(
            result,
            transient=True,
            headers=(*result.headers, ("retry-after", str(decision.retry_after))),
        )
    return problem_result(
        422,
        "key-reused",
        "Idempotency-Key reused",
        "this Idempotency-Key was used for a different request (method, path or body); "
        "the original is unchanged",
        operation_id=decision.operation_id,
    )


def hooked_refusal(
    decision: ClaimDecision, key: str, hook: ReplayHook, info: ReplayInfo
) -> OpResult:
    """``refusal`` for a route with a replay hook: a replay's body is the hook's, and an
    "already applied" carries what the hook returns, called with no stored body, under
    ``current`` (nothing when it returns None)."""
    result = claim_refusal(decision, key)
    if decision.outcome is ClaimOutcome.REPLAY:
        assert decision.response is not None
        kept = decision.response
        body = json.loads(kept.body) if kept.body and kept.body_format == "json" else None
        return dataclasses.replace(result, refresh=lambda tx: hook(tx, body, info))
    if decision.outcome is ClaimOutcome.ALREADY_APPLIED:
        answer = result.body

        purged = dataclasses.replace(info, response_kept=False)

        def current(tx: Tx) -> Any:
            found = hook(tx, None, purged)
            return None if found is None else answer | {"current": found}

        return dataclasses.replace(result, refresh=current)
    return result


def refresh_all(store: IdempotencyStore, results: list[OpResult]) -> list[OpResult]:
    """Run the replay hooks of ``results`` (one read-only transaction of the store for
    all of them)."""
    if not any(r.refresh is not None for r in results):
        return results
    try:
        with store.read_only() as tx:
            return refresh_in(tx, results)
    except Exception as exc:
        failure(
            log,
            "replay hooks skipped, the stored responses are sent",
            exc=exc,
            level=logging.WARNING,
        )
        return [dataclasses.replace(r, refresh=None) for r in results]


def refresh_in(tx: Tx, results: list[OpResult], *, strict: bool = False) -> list[OpResult]:
    """Run the replay hooks of ``results`` in ``tx``. A hook that fails leaves its result
    the stored response, or with ``strict`` raises."""
    return [_refreshed(tx, r, strict) for r in results]


def _refreshed(tx: Tx, result: OpResult, strict: bool = False) -> OpResult:
    if result.refresh is None:
        return result
    try:
        body = result.refresh(tx)
    except Exception as exc:
        if strict:
            raise
        failure(log, "replay hook failed, the stored response is sent", exc=exc)
        return dataclasses.replace(result, refresh=None)
    text = result.body_text if body is None else canonical_json(body)
    return dataclasses.replace(result, body_text=text, refresh=None)
