"""Who is asking: the principal that scopes every idempotency key, note and record.

An authenticator is any callable ``HTTPConnection -> str | None``: the principal the
request's credentials name, None when it carries none, or ``AuthorizationRequired`` (401)
for credentials it refuses. Whether a request without credentials may go on, as the one
principal ``anonymous``, is the access policy's decision (`pigeon.server.access`), not the
authenticator's. Keys are stored per principal, so one user's key never reaches another
user's response, and a refreshed token of the same user still replays.

Principals are compared exactly as the authenticator returns them: ``Alice`` and
``alice`` are two users (no case folding, no Unicode normalisation), as the token says.

pigeon ships two authenticators: ``JwtAuth`` (`pigeon.server.jwt_auth`), which verifies
signed tokens, and ``BearerAuth``, a stand-in for demos and tests that verifies nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from pigeon.exceptions import AuthorizationRequired

Authenticator = Callable[[HTTPConnection], str | None]

ANONYMOUS = "anonymous"
# Keys are stored per (principal, key) in one index entry: a principal of a few KB cannot
# be indexed by PostgreSQL (2704 bytes a btree entry). Like the key's own limit.
MAX_PRINCIPAL_LENGTH = 255


def principal_of(
    authenticate: Authenticator, conn: HTTPConnection, *, allow_anonymous: bool
) -> str | None:
    """The principal ``authenticate`` names; without credentials ``anonymous`` when
    ``allow_anonymous``, else None. Refused (``AuthorizationRequired``, 401) when it cannot
    scope a key: empty, too long to index (a long one was answered 503 "store unavailable"
    for ever on PostgreSQL while SQLite took it), or not printable text (a lone surrogate,
    from a signed ``sub`` of ``"\ud800x"``, could not be encoded for the store: 500 on
    every route). The one check of every authenticator's answer, demo and JWT alike."""
    principal = authenticate(conn)
    if principal is None:
        return ANONYMOUS if allow_anonymous else None
    if not isinstance(principal, str) or not principal:
        raise AuthorizationRequired("the credentials name no principal", status=401)
    if len(principal) > MAX_PRINCIPAL_LENGTH:
        raise AuthorizationRequired(
            f"the principal is {len(principal)} characters, at most {MAX_PRINCIPAL_LENGTH} allowed",
            status=401,
        )
    if not principal.isprintable():  # a control, format or lone surrogate character
        raise AuthorizationRequired(
            "the principal holds a character that is not printable text", status=401
        )
    return principal


def bearer_token(conn: HTTPConnection) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None without the header;
    ``AuthorizationRequired`` (401) when it is repeated or not a bearer token."""
    values = conn.headers.getlist("authorization")
    if not values:
        return None
    if len(values) > 1:
        raise AuthorizationRequired("the Authorization header must appear once", status=401)
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthorizationRequired("the Authorization header must be 'Bearer <token>'", status=401)
    return token


@dataclass(frozen=True, slots=True)
class BearerAuth:
    """DEMO AND TEST STAND-IN, NOT AUTHENTICATION: ``Authorization: Bearer
    <principal>.<anything>`` names the principal, and nothing is verified, so anyone can
    claim to be anyone. Use ``JwtAuth`` (``pigeon serve --auth jwt``) wherever the server
    can be reached by someone you do not trust; ``pigeon serve`` refuses to listen on a
    non-loopback address with this stand-in unless told ``--insecure``.

    Only the part before the first dot counts, so ``alice.v1`` and ``alice.v2`` (a
    refreshed token) are the same principal. ``required``: a request without the header
    is refused here (401) instead of being left to the access policy.
    """

    required: bool = False

    def __call__(self, conn: HTTPConnection) -> str | None:
        token = bearer_token(conn)
        if token is None:
            if self.required:
                raise AuthorizationRequired(
                    "an Authorization: Bearer token is required", status=401
                )
            return None
        principal = token.partition(".")[0]
        if not principal:
            raise AuthorizationRequired("the bearer token names no principal", status=401)
        return principal
