"""Calls to providers outside the database (payments, e-mail), made safe to repeat.

Before the first call the helper stores a durable business reference and the provider's
idempotency key. Every later attempt reuses that key. When an attempt ends without a
known outcome (timeout, dropped connection) the helper asks the provider
``lookup(reference)`` and takes the original's result if it happened; it never mints a
new key, so the provider never sees the request as a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from pigeon.core.ids import uuid7
from pigeon.exceptions import PermanentError, RetryableError, UnknownOutcome
from pigeon.jobs.rows import PROVIDER_RESULT, dumps, loads
from pigeon.jobs.store import JobStore, ProviderSession
from pigeon.jobs.stores import store_for
from pigeon.storage.base import Database

# What counts as "it may or may not have happened".
UNKNOWN_OUTCOME: tuple[type[BaseException], ...] = (UnknownOutcome, TimeoutError, ConnectionError)


class Provider(Protocol):
    name: str

    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        """Perform the effect; the provider dedups on ``idempotency_key``."""

    def lookup(self, reference: str) -> Any | None:
        """The result of the effect made for ``reference``, or None if it never happened."""


def call_provider(
    db: Database | JobStore[ProviderSession],
    provider: Provider,
    reference: str,
    request: Any,
    *,
    record_id: str | None = None,
    obligation: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Any:
    """Make (or finish making) the provider call for ``reference``; returns its result.

    Raises RetryableError when the outcome is still unknown after a lookup (run the job
    again later: it will reuse the key), PermanentError when the provider refused."""
    store: JobStore[ProviderSession] = store_for(db)
    with store.transaction() as session:
        row = session.provider_call(reference)
        if row is None:
            key, attempts = uuid7(), 0
            session.insert_provider_call(
                reference=reference,
                provider=provider.name,
                idempotency_key=key,
                request=dumps(request),
                now=clock(),
            )
        elif row["status"] == "succeeded":
            return loads(row["result"])
        elif row["status"] == "failed":
            refusal = row["result"]
            raise PermanentError(f"provider {provider.name} refused {reference}: {refusal}")
        else:
            key, attempts = row["idempotency_key"], int(row["attempts"])
        session.count_provider_attempt(reference, clock())
    if attempts > 0:
        # An earlier attempt may have applied: ask before calling again.
        found = provider.lookup(reference)
        if found is not None:
            return _settle(
                store, reference, "succeeded", found, "lookup", record_id, obligation, clock
            )
    try:
        result = provider.call(reference, key, request)
    except UNKNOWN_OUTCOME as exc:
        found = provider.lookup(reference)
        if found is None:
            raise RetryableError(
                f"provider {provider.name}: outcome of {reference} unknown ({exc!r}); "
                "will retry with the same key"
            ) from exc
        return _settle(store, reference, "succeeded", found, "lookup", record_id, obligation, clock)
    except PermanentError as exc:
        _settle(store, reference, "failed", str(exc), "call", record_id, obligation, clock)
        raise
    return _settle(store, reference, "succeeded", result, "call", record_id, obligation, clock)


def _settle(
    store: JobStore[ProviderSession],
    reference: str,
    status: str,
    result: Any,
    via: str,
    record_id: str | None,
    obligation: str | None,
    clock: Callable[[], float],
) -> Any:
    now = clock()
    with store.transaction() as session:
        session.settle_provider_call(reference, status, dumps(result), now)
        if record_id:
            detail = {"reference": reference, "status": status, "via": via, "result": result}
            session.ledger_event(record_id, obligation, PROVIDER_RESULT, detail, now)
    return result


def provider_call(
    db: Database | JobStore[ProviderSession], reference: str
) -> dict[str, Any] | None:
    with store_for(db).reading() as session:
        row = session.provider_call(reference)
    if row is None:
        return None
    return {**row, "request": loads(row["request"]), "result": loads(row["result"])}
