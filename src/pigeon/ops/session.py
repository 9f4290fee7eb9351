"""The browser's session on the operations page, and its CSRF token.

The operator credential is a bearer token (or whatever ``OperatorCheck`` accepts). A browser
cannot send a header by itself, so the page's sign-in form takes the credential once,
checks it, and opens a *session*: a random id (``secrets.token_urlsafe``) in a cookie, never
the credential itself. The server keeps the session in its database (table
``pigeon_ops_sessions``, so every process and node of the server knows it), under the
SHA-256 of its id (a copy of the database opens no session), with:

- who signed in (for the action log's "who");
- the fingerprint of the operator credential it was made under (`operator_fingerprint`):
  once the credential changes, every session made under the old one is refused (and
  deleted) wherever it is presented;
- an idle limit and an absolute lifetime (`pigeon.server.options.SessionPolicy`:
  ``PIGEON_OPS_SESSION_IDLE`` / ``PIGEON_OPS_SESSION_LIFETIME``, seconds, read once by
  ``pigeon serve``): past either, the page asks to sign in again.

Signing out deletes the session on the server: a copy of the cookie is worth nothing after.

The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page,
link or form makes the browser send it), ``Path=<page>/`` (no other route of the server gets
it), ``Secure`` when the page is served over HTTPS, with a ``Max-Age`` of the lifetime. The
access layer (`pigeon.server.access.BrowserLogin`) looks the session up and lets a valid one
in as the operator, and refuses a write it carried that does not come from the page's own
origin. Each form carries a CSRF token, an HMAC keyed by the session id: only a page that
was served with the cookie knows it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.responses import Response

from pigeon.jobs._db import reading
from pigeon.server import access
from pigeon.server.options import SessionPolicy
from pigeon.storage.base import Database
from pigeon.storage.queries import QuerySet

COOKIE = "pigeon_ops"
NAME_COOKIE = "pigeon_ops_name"  # set by older releases: cleared at sign-in and sign-out
MAX_NAME = 64
SESSIONS = QuerySet("ops_sessions")
# What secrets.token_urlsafe(32) makes: anything else in the cookie is no session of ours,
# and is refused before it is hashed or looked up.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class Session:
    """A valid session, as the access layer found it: its id (the cookie's, for the CSRF
    token) and who signed in."""

    id: str
    name: str

    def __repr__(self) -> str:  # the id is a bearer secret: never in a log or traceback
        return f"Session(<hidden>, name={self.name!r})"


def operator_fingerprint(check: access.OperatorCheck | None) -> str:
    """Names the operator credential a session is made under: the check's own
    ``fingerprint()`` (``access.OperatorToken`` has one), or "" for a check without one
    (its sessions then end only by time or sign-out)."""
    found = getattr(check, "fingerprint", None)
    return str(found()) if callable(found) else ""


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


class Sessions:
    """The sessions in ``db`` under ``policy``; ``clock``: seconds since the epoch."""

    def __init__(
        self,
        db: Database,
        policy: SessionPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.policy = policy or SessionPolicy()
        self.clock = clock

    def open(self, name: str, operator: access.OperatorCheck | None) -> str:
        """A new session for ``name``, signed in under ``operator``'s credential: its id,
        for the cookie (the database keeps only its hash). Ended sessions go meanwhile."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        with self.db.transaction() as tx:
            SESSIONS.run(tx, "session_purge", {"now": now, "idle_before": now - self.policy.idle})
            SESSIONS.run(
                tx,
                "session_insert",
                {
                    "id_hash": _digest(session_id),
                    "credential": operator_fingerprint(operator),
                    "name": name,
                    "now": now,
                    "expires_at": now + self.policy.lifetime,
                },
            )
        return session_id

    def lookup(self, session_id: str, operator: access.OperatorCheck | None) -> Session | None:
        """The session of this cookie value, if it is one, has not ended and was made under
        the operator credential ``operator`` holds now; None otherwise. A session of
        another credential is deleted; its last use is written now and then."""
        if not _SESSION_ID.fullmatch(session_id):
            return None
        key = _digest(session_id)
        with reading(self.db) as tx:
            row = SESSIONS.run(tx, "session_get", {"id_hash": key}).fetchone()
        if row is None:
            return None
        now = self.clock()
        credential = operator_fingerprint(operator)
        ended = row["expires_at"] <= now or row["seen_at"] + self.policy.idle <= now
        if ended or not hmac.compare_digest(row["credential"], credential):
            self.close(session_id)
            return None
        if now - row["seen_at"] >= self.policy.touch_every:
            with self.db.transaction() as tx:
                SESSIONS.run(tx, "session_touch", {"id_hash": key, "now": now})
        return Session(session_id, str(row["name"]))

    def close(self, session_id: str) -> None:
        """End the session (signing out): its cookie, or any copy of it, opens nothing."""
        if not _SESSION_ID.fullmatch(session_id):
            return
        with self.db.transaction() as tx:
            SESSIONS.run(tx, "session_delete", {"id_hash": _digest(session_id)})


def csrf_token(session_id: str) -> str:
    return hmac.new(session_id.encode("utf-8"), b"pigeon-ops-csrf", hashlib.sha256).hexdigest()


def csrf_ok(found: Session | None, presented: str | None) -> bool:
    """A form's token matches the session's (constant time). No session (the request
    carried the Authorization header itself, which no other site can make a browser
    send): nothing to check."""
    if found is None:
        return True
    if not presented:
        return False
    return hmac.compare_digest(csrf_token(found.id).encode(), presented.encode("utf-8", "replace"))


def current(conn: HTTPConnection) -> Session | None:
    """The session the request's cookie opened (None: it came with the header)."""
    found = access.browser_session(conn)
    return found if isinstance(found, Session) else None


def set_session(
    response: Response, conn: HTTPConnection, base: str, session_id: str, lifetime: float
) -> None:
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(lifetime),
        path=base + "/",
        secure=conn.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    response.delete_cookie(NAME_COOKIE, path=base + "/", httponly=True, samesite="strict")


def clear_session(response: Response, base: str) -> None:
    for key in (COOKIE, NAME_COOKIE):
        response.delete_cookie(key, path=base + "/", httponly=True, samesite="strict")


def signed_in_name(conn: HTTPConnection) -> str:
    found = current(conn)
    return found.name if found is not None else ""
