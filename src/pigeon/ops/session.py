"""The browser's session on the operations page, and its CSRF token.

The operator credential is a bearer token (or whatever ``OperatorCheck`` accepts). A browser
cannot send a header by itself, so the page's login form takes the token once and sets it
in a cookie the browser sends back to the page's routes alone:

- ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page, link or form
  makes the browser send it), ``Path=<page>/`` (no other route of the server gets it),
  ``Secure`` when the page is served over HTTPS, and ``Max-Age`` of ``SESSION_SECONDS``;
- the access layer (`pigeon.server.access.BrowserLogin`) takes it as the Authorization
  header, so the cookie passes the very same operator check as the header, and refuses a
  write it carried that does not come from the page's own origin (Origin / Referer host
  equal to Host, ``Sec-Fetch-Site`` same-origin);
- each form carries a CSRF token, an HMAC of the fixed text ``pigeon-ops-csrf`` keyed by
  the credential: only a page that was served with the cookie knows it, and it needs no
  server-side state, so any process or node of the server checks it.

Signing out clears the cookie; changing the operator token ends every session at once.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import HTTPConnection
from starlette.responses import Response

COOKIE = "pigeon_ops"
NAME_COOKIE = "pigeon_ops_name"  # who signed in (for the action log's "who"), not a secret
SESSION_SECONDS = 8 * 3600
MAX_NAME = 64


def csrf_token(credential: str) -> str:
    return hmac.new(credential.encode("utf-8"), b"pigeon-ops-csrf", hashlib.sha256).hexdigest()


def csrf_ok(credential: str | None, presented: str | None) -> bool:
    """A form's token matches the session's (constant time). No cookie credential (the
    request carried the Authorization header itself, which no other site can make a
    browser send): nothing to check."""
    if credential is None:
        return True
    if not presented:
        return False
    return hmac.compare_digest(csrf_token(credential).encode(), presented.encode())


def set_session(response: Response, conn: HTTPConnection, base: str, token: str, name: str) -> None:
    secure = conn.url.scheme == "https"
    for key, value in ((COOKIE, token), (NAME_COOKIE, name)):
        response.set_cookie(
            key,
            value,
            max_age=SESSION_SECONDS,
            path=base + "/",
            secure=secure,
            httponly=True,
            samesite="strict",
        )


def clear_session(response: Response, base: str) -> None:
    for key in (COOKIE, NAME_COOKIE):
        response.delete_cookie(key, path=base + "/", httponly=True, samesite="strict")


def signed_in_name(conn: HTTPConnection) -> str:
    name = conn.cookies.get(NAME_COOKIE, "").strip()
    return name[:MAX_NAME] if name.isprintable() else ""
