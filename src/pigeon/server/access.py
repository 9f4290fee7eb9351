"""Who may call which route: the one place that decides, for every route of the app.

Each route declares its rule where it is built, by wrapping it:

- ``public(route)``: anyone; credentials are not even read (the health probe, the OpenAPI
  document).
- ``user(route)``: a *user* principal, who reaches only its own keys, notes, records and
  conflicts (the handlers scope every read and write by it). No credentials: 401, unless
  the app allows anonymous callers, who are then all the one principal ``anonymous``.
  The operator credential acts for no user: 403.
- ``owner(route)``: a user principal or an operator; the handler shows a user only what
  it owns, and answers 404 for the rest (a record: never 403, which would confirm it
  exists).
- ``operator(route)``: the operator credential alone (the dashboard, the ledger,
  ``/metrics`` and the dashboard's actions). No or bad credentials: 401, so the operator's
  tooling asks for them. A signed-in *user*: 404, the very answer of a route that does
  not exist. Not 401, which tells the client to sign in again (the edge queue pauses on
  it) although its credentials are fine; not 403, which confirms an operator surface is
  there and invites probing it; a user has no business knowing either.

``create_app`` binds every route to the app's ``AccessPolicy`` (``bind``) and refuses to
build an app with a route that declares no rule, mounted routes included: a route added
later without a rule fails at start, not in production. The decision is made before the
route's own code and before Starlette's 405, so nothing of a route is reached without it;
the handler reads the decision with ``caller`` / ``principal``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URLPath
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketClose

from pigeon.core.wire import PROBLEM_JSON, canonical_json
from pigeon.exceptions import AuthorizationRequired, ConfigurationError
from pigeon.server.auth import ANONYMOUS, Authenticator, bearer_token, principal_of
from pigeon.server.problems import problem

OperatorCheck = Callable[[HTTPConnection], bool]
"""Does this request carry the operator credential? (e.g. ``OperatorToken``, or a check of
a role claim in the caller's own token)."""

# The operator token is a password: anything shorter is guessable over the network.
MIN_OPERATOR_TOKEN = 16
_SCOPE_KEY = "pigeon.caller"


class Rule(enum.Enum):
    PUBLIC = "public"
    USER = "user"
    OWNER = "owner"  # a user (the handler checks ownership) or an operator
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the access layer let in: a user principal, or the operator (``principal`` None),
    or nobody in particular on a public route."""

    principal: str | None
    operator: bool = False


PUBLIC_CALLER = Caller(None)
OPERATOR_CALLER = Caller(None, operator=True)


@dataclass(frozen=True, slots=True)
class OperatorToken:
    """``Authorization: Bearer <token>`` equal to the configured operator token, compared
    in constant time. The token is never logged and never in an answer; its ``repr``
    hides it."""

    token: str

    def __post_init__(self) -> None:
        if len(self.token) < MIN_OPERATOR_TOKEN:
            raise ConfigurationError(
                f"the operator token must be at least {MIN_OPERATOR_TOKEN} characters "
                f"(it is {len(self.token)}); make one with: python -c "
                "'import secrets; print(secrets.token_urlsafe(32))'"
            )

    def __repr__(self) -> str:
        return "OperatorToken(<hidden>)"

    def fingerprint(self) -> str:
        """Names this token without revealing it: browser sessions remember it and end
        when the token changes (`pigeon.ops.session`). scrypt, so that a copy of the
        database does not make a weak token quick to guess."""
        return _fingerprint(self.token)

    def __call__(self, conn: HTTPConnection) -> bool:
        presented = bearer_token(conn)
        if presented is None:
            return False
        # compare_digest on bytes: its time does not depend on where the two differ.
        return hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8"))


@functools.lru_cache(maxsize=4)
def _fingerprint(token: str) -> str:
    key = hashlib.scrypt(
        token.encode("utf-8"), salt=b"pigeon-operator-token", n=2**14, r=8, p=1, dklen=16
    )
    return key.hex()


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """``authenticate`` names the user (None: no credentials given); ``operator`` says
    whether the request carries the operator credential (None: nobody is an operator);
    ``allow_anonymous``: callers without credentials are the user ``anonymous``."""

    authenticate: Authenticator
    operator: OperatorCheck | None = None
    allow_anonymous: bool = False

    def decide(self, rule: Rule, conn: HTTPConnection) -> Caller | Response:
        """The caller this rule lets in, or the refusal to send instead."""
        if rule is Rule.PUBLIC:
            return PUBLIC_CALLER
        try:
            is_operator = self.operator is not None and self.operator(conn)
        except AuthorizationRequired as exc:  # a hook that refuses what it was shown
            return auth_refusal(exc.status or 401, "unauthorized", "Unauthorized", str(exc))
        if is_operator and rule in (Rule.OPERATOR, Rule.OWNER):
            return OPERATOR_CALLER
        if is_operator:
            return auth_refusal(
                403, "operator-not-a-user", "Forbidden", "the operator credential acts for no user"
            )
        try:
            principal = principal_of(self.authenticate, conn, allow_anonymous=False)
        except AuthorizationRequired as exc:
            return auth_refusal(exc.status or 401, "unauthorized", "Unauthorized", str(exc))
        if rule is Rule.OPERATOR:
            if principal is None:
                return auth_refusal(
                    401, "unauthorized", "Unauthorized", "operator credentials required"
                )
            return no_such_route(conn)
        if principal is None:
            if not self.allow_anonymous:
                detail = "credentials are required (Authorization: Bearer <token>)"
                return auth_refusal(401, "unauthorized", "Unauthorized", detail)
            principal = ANONYMOUS
        return Caller(principal)


def auth_refusal(status: int, slug: str, title: str, detail: str) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = problem(status, slug, title, detail)
    return _problem_response(body, headers)


def no_such_route(conn: HTTPConnection) -> Response:
    """The router's own 404 (``app._route_problem``), word for word."""
    method = conn.scope.get("method", "GET")
    detail = f"no route {method} {conn.url.path}"
    return _problem_response(problem(404, "no-such-route", "Not found", detail), None)


def _problem_response(body: dict[str, object], headers: dict[str, str] | None) -> Response:
    # The canonical encoding the intake's own problems use (results.problem_result).
    status = body["status"]
    assert isinstance(status, int)
    return Response(canonical_json(body), status, headers=headers, media_type=PROBLEM_JSON)


class BrowserSessions(Protocol):
    """Where the access layer looks a browser's session cookie up (`pigeon.ops.session.
    Sessions`): the session, or None when the value opens none (unknown, ended, signed out,
    or made under an operator credential other than ``operator``'s now)."""

    def lookup(self, session_id: str, operator: OperatorCheck | None) -> object | None: ...


@dataclass(frozen=True, slots=True)
class BrowserLogin:
    """How a browser reaches an operator route (the operations page): the cookie
    ``cookie`` names a session in ``sessions`` (opened by the page's sign-in form; the
    cookie never holds the credential itself). A valid session, when the request has no
    Authorization header, lets the request in as the operator; any other cookie value is
    refused like missing credentials. A request authenticated by the cookie whose method
    changes anything must come from the page's own origin (``Origin`` or ``Referer`` host
    equal to ``Host``; ``Sec-Fetch-Site`` not cross-site): 403 otherwise. The page's forms
    also carry a CSRF token (`pigeon.ops.session`). ``login``: the answer to a browser
    (``Accept: text/html``) without valid credentials, the login form with status 401,
    instead of the problem+json every other client gets; awaited, so that a page is
    rendered off the event loop."""

    cookie: str
    login: Callable[[HTTPConnection], Awaitable[Response]] | None = None
    sessions: BrowserSessions | None = field(default=None, kw_only=True)


_COOKIE_FLAG = "pigeon.browser_cookie"
_SESSION_KEY = "pigeon.browser_session"
_SAFE_METHODS = frozenset({"GET", "HEAD"})


async def _from_cookie(
    scope: Scope, browser: BrowserLogin, operator: OperatorCheck | None
) -> Scope | Response:
    """The scope with the cookie's session (None: it opens none), or a refusal of a
    cross-site write; the scope unchanged when there is no cookie or a header."""
    conn = HTTPConnection(scope)
    if "authorization" in conn.headers:
        return scope
    value = conn.cookies.get(browser.cookie)
    if not value:
        return scope
    if scope.get("method", "GET") not in _SAFE_METHODS and not same_origin(conn):
        return auth_refusal(403, "cross-site", "Forbidden", "a cross-site request was refused")
    found = None
    if browser.sessions is not None:  # the lookup reads the database: not on the loop
        found = await run_in_threadpool(browser.sessions.lookup, value, operator)
    return {**scope, _COOKIE_FLAG: True, _SESSION_KEY: found}


def same_origin(conn: HTTPConnection) -> bool:
    """The request comes from a page of this host: its ``Origin`` (else ``Referer``) names
    the ``Host`` it was sent to, and the browser does not call it cross-site."""
    if conn.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    host = conn.headers.get("host")
    source = conn.headers.get("origin") or conn.headers.get("referer")
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc == host


def browser_session(conn: HTTPConnection) -> object | None:
    """The session a cookie opened for this request (None: no cookie, or the request
    came with an Authorization header)."""
    return conn.scope.get(_SESSION_KEY)


class Guarded(BaseRoute):
    """A route with its declared rule, applied before anything of the route runs."""

    def __init__(self, route: BaseRoute, rule: Rule, browser: BrowserLogin | None = None) -> None:
        if isinstance(route, Guarded):
            raise ConfigurationError(f"{describe_route(route.route)} declares two access rules")
        if browser is not None and rule is not Rule.OPERATOR:
            raise ConfigurationError("a browser login is for operator routes only")
        self.route: BaseRoute = route
        self.rule = rule
        self.browser = browser
        self.policy: AccessPolicy | None = None

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return self.route.matches(scope)

    def url_path_for(self, name: str, /, **path_params: object) -> URLPath:
        return self.route.url_path_for(name, **path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.policy is None:  # create_app binds every route: reaching this is a bug
            raise ConfigurationError(
                f"{describe_route(self.route)} is not bound to an access policy"
            )
        if self.browser is not None and scope["type"] == "http":
            found = await _from_cookie(scope, self.browser, self.policy.operator)
            if isinstance(found, Response):
                await found(scope, receive, send)
                return
            scope = found
        conn = HTTPConnection(scope)
        decided: Caller | Response
        if scope.get(_SESSION_KEY) is not None:  # a valid session is the operator's alone
            decided = OPERATOR_CALLER
        elif scope.get(_COOKIE_FLAG):
            decided = auth_refusal(401, "unauthorized", "Unauthorized", "sign in again")
        else:
            decided = self.policy.decide(self.rule, conn)
        # No credentials, or a cookie that opens no session (unknown, ended, signed out,
        # or made under another operator credential): sign in again.
        if (
            isinstance(decided, Response)
            and self.browser is not None
            and (decided.status_code == 401 or scope.get(_COOKIE_FLAG))
        ):
            if self.browser.login is not None and "text/html" in conn.headers.get("accept", ""):
                decided = await self.browser.login(conn)
            else:
                decided = auth_refusal(401, "unauthorized", "Unauthorized", "sign in again")
        if isinstance(decided, Response):
            if scope["type"] == "websocket":
                await WebSocketClose(code=1008)(scope, receive, send)  # policy violation
            else:
                await decided(scope, receive, send)
            return
        scope[_SCOPE_KEY] = decided
        await self.route.handle(scope, receive, send)

    def __repr__(self) -> str:
        return f"Guarded({self.route!r}, {self.rule.value})"


def public(route: BaseRoute) -> Guarded:
    return Guarded(route, Rule.PUBLIC)


def user(route: BaseRoute) -> Guarded:
    return Guarded(route, Rule.USER)


def owner(route: BaseRoute) -> Guarded:
    return Guarded(route, Rule.OWNER)


def operator(route: BaseRoute, *, browser: BrowserLogin | None = None) -> Guarded:
    """``browser``: a browser may also present the credential in a cookie (the operations
    page; see `BrowserLogin`)."""
    return Guarded(route, Rule.OPERATOR, browser)


@dataclass(frozen=True, slots=True)
class RouteRule:
    """One route as the app serves it (mount prefixes included) and its rule."""

    path: str
    methods: frozenset[str]
    rule: Rule | None
    route: BaseRoute


def describe_route(route: BaseRoute, prefix: str = "") -> str:
    path = prefix + str(getattr(route, "path", "?"))
    methods = sorted(getattr(route, "methods", None) or ())
    return f"route {' '.join(methods) or '*'} {path or '/'}".replace("  ", " ")


def route_rules(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[RouteRule]:
    """Every route the app serves, mounted ones included, with the rule that covers it:
    its own, or that of a guarded ``Mount`` above it. None where there is none."""
    for route in routes:
        rule = route.rule if isinstance(route, Guarded) else None
        inner = route.route if isinstance(route, Guarded) else route
        path = prefix + str(getattr(inner, "path", ""))
        if isinstance(inner, Mount):
            children = list(route_rules(inner.routes, path))
            if rule is not None:  # the mount's rule covers whatever is below it
                children = [RouteRule(c.path, c.methods, c.rule or rule, c.route) for c in children]
            yield from children or [RouteRule(path, frozenset(), rule, route)]
        else:
            methods = frozenset(getattr(inner, "methods", None) or ())
            yield RouteRule(path, methods, rule, route)


def bind(routes: Iterable[BaseRoute], policy: AccessPolicy, prefix: str = "") -> None:
    """Bind every guarded route (mounted ones too) to ``policy``; ConfigurationError for a
    route that declares no rule (or a mount that no rule covers)."""
    for route in routes:
        inner = route
        if isinstance(route, Guarded):
            if route.policy is not None and route.policy is not policy:
                raise ConfigurationError(
                    f"{describe_route(route.route, prefix)} is already served by another app: "
                    "build its routes again for each app"
                )
            route.policy = policy
            inner = route.route
        if isinstance(inner, Mount):
            covered = isinstance(route, Guarded)
            _bind_mount(inner, covered=covered, policy=policy, prefix=prefix)
        elif not isinstance(route, Guarded):
            raise ConfigurationError(
                f"{describe_route(route, prefix)} declares no access rule: wrap it in "
                "pigeon.server.access.public / user / owner / operator"
            )


def _bind_mount(mount: Mount, *, covered: bool, policy: AccessPolicy, prefix: str) -> None:
    children = mount.routes
    if not children and not covered:
        raise ConfigurationError(
            f"{describe_route(mount, prefix)} mounts an app with no routes to check: wrap the "
            "Mount itself in pigeon.server.access.public / user / owner / operator"
        )
    below = prefix + mount.path
    for child in children:
        if isinstance(child, Guarded) or not covered:
            bind([child], policy, below)
        elif isinstance(child, Mount):
            _bind_mount(child, covered=True, policy=policy, prefix=below)


def caller(conn: HTTPConnection) -> Caller:
    """The caller the route's rule let in (only in a guarded route's handler)."""
    found = conn.scope.get(_SCOPE_KEY)
    if not isinstance(found, Caller):
        raise ConfigurationError(f"{conn.url.path} was reached without an access decision")
    return found


def principal(conn: HTTPConnection) -> str:
    """The user principal of a ``user`` route's caller."""
    found = caller(conn).principal
    if found is None:
        raise ConfigurationError(f"{conn.url.path} is not a user route")
    return found


def unwrap(route: BaseRoute) -> BaseRoute:
    return route.route if isinstance(route, Guarded) else route


__all__ = [
    "AccessPolicy",
    "BrowserLogin",
    "BrowserSessions",
    "Caller",
    "Guarded",
    "OperatorCheck",
    "OperatorToken",
    "Rule",
    "bind",
    "browser_session",
    "caller",
    "operator",
    "owner",
    "principal",
    "public",
    "route_rules",
    "user",
]
