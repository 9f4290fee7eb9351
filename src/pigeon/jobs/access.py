"""Revoked principals: the simple, durable list a task's access re-check reads.

A job runs later than the request that made it, sometimes much later (retries, a backlog,
a reviewed retry days on). Whoever asked for it may have lost access meanwhile: an account
closed, a token revoked, a user removed. Jobs therefore carry ids, not authority, and a
task that acts for a principal declares an access re-check (``@app.task(access=...)``)
that runs, in a read transaction, before the work; one that refuses ends the job in the
failed store with its owner, never retried (``AccessRevoked``).

    access.revoke(tx, "alice", reason="account closed")   # in any transaction
    access.revoked(tx, "alice")                           # -> "account closed" or None
    access.restore(tx, "alice")

Revocation is by exact principal, compared as the authenticator gives it (no case folding).

These run in the caller's transaction by design (a revocation is written with the
application's own change of the account; the re-check reads in the worker's): a storage
``Tx``, written and read through the jobs store's session on it (an ``AccessSession``).
"""

from __future__ import annotations

import time

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.store import AccessSession
from pigeon.jobs.stores import session_for
from pigeon.storage.base import Tx


def _session(tx: Tx) -> AccessSession:
    return session_for(tx)


def _principal(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidOperation(f"a principal is a non-empty string, not {value!r}")
    return value


def revoke(tx: Tx, principal: str, *, reason: str, now: float | None = None) -> None:
    """Record that ``principal`` lost access (again: the latest reason and time win)."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidOperation("revoking a principal needs a reason")
    now = time.time() if now is None else now
    _session(tx).revoke_principal(_principal(principal), reason, now)


def restore(tx: Tx, principal: str) -> None:
    """Give ``principal`` its access back (jobs already failed stay in the failed store,
    where a reviewed retry runs them)."""
    _session(tx).restore_principal(_principal(principal))


def revoked(tx: Tx, principal: str) -> str | None:
    """Why ``principal`` lost access, or None while it has it."""
    return _session(tx).principal_revoked(principal)
