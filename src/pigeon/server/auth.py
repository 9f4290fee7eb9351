"""Who is asking: the principal that scopes every idempotency key.

An authenticator is any callable ``Request -> str`` (or ``HTTPConnection``); it raises
``AuthorizationRequired`` to refuse. Keys are stored per principal, so one user's key never
reaches another user's response, and a refreshed token of the same user still replays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from pigeon.exceptions import AuthorizationRequired

Authenticator = Callable[[HTTPConnection], str]

ANONYMOUS = "anonymous"
# Keys are stored per (principal, key) in one index entry: a principal of a few KB cannot
# be indexed by PostgreSQL (2704 bytes a btree entry). Like the key's own limit.
MAX_PRINCIPAL_LENGTH = 255


def principal_of(authenticate: Authenticator, conn: HTTPConnection) -> str:
    """The principal ``authenticate`` names, refused (``AuthorizationRequired``, 401) when
    it cannot scope a key: empty, or too long to index. Without this a long one was
    answered 503 "store unavailable" for ever on PostgreSQL while SQLite took it."""
    principal = authenticate(conn)
    if not principal:
        raise AuthorizationRequired("the credentials name no principal", status=401)
    if len(principal) > MAX_PRINCIPAL_LENGTH:
        raise AuthorizationRequired(
            f"the principal is {len(principal)} characters, at most {MAX_PRINCIPAL_LENGTH} allowed",
            status=401,
        )
    return principal


@dataclass(frozen=True, slots=True)
class BearerAuth:
    """``Authorization: Bearer <principal>.<anything>`` names the principal.

    This is the reference application's stand-in for a real token check: only the part
    before the first dot counts, so ``alice.v1`` and ``alice.v2`` (a refreshed token) are
    the same principal. Without the header the request is ``anonymous`` unless
    ``required`` is set.
    """

    required: bool = False

    def __call__(self, conn: HTTPConnection) -> str:
        values = conn.headers.getlist("authorization")
        if not values:
            if self.required:
                raise AuthorizationRequired(
                    "an Authorization: Bearer token is required", status=401
                )
            return ANONYMOUS
        if len(values) > 1:
            raise AuthorizationRequired("the Authorization header must appear once", status=401)
        scheme, _, token = values[0].strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthorizationRequired(
                "the Authorization header must be 'Bearer <principal>.<token>'", status=401
            )
        principal = token.strip().partition(".")[0]
        if not principal:
            raise AuthorizationRequired("the bearer token names no principal", status=401)
        return principal
