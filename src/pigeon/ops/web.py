"""The operations page: ``GET /pigeon/`` on the reference server, or mounted in any ASGI app
(``dashboard_app``). Server-rendered HTML (Jinja2 templates, package data), no script: a
``<meta refresh>`` reloads it, the charts are inline SVG. Every figure is
`pigeon.ops.queries.overview`'s. Operator-only (`pigeon.server.access`), the actions too;
a browser signs in once with the operator token (`pigeon.ops.session`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.app import App
from pigeon.ops import actions, session
from pigeon.ops.queries import DEFAULT_WINDOW, WINDOWS, overview
from pigeon.ops.signin_limit import SignInLimit, SignInLimiter, client_key
from pigeon.server import access
from pigeon.server.limits import read_buffer
from pigeon.server.options import SessionPolicy
from pigeon.server.results import OpResult
from pigeon.storage.base import Database

if TYPE_CHECKING:
    import jinja2

PAGE_PREFIX = "/pigeon"
MAX_FORM = 256 * 1024  # bytes of a form (job ids of a selection)
REFRESH = 30  # seconds between reloads of the page
HEADERS = {
    # No script, no frame, no form to another origin; styles and the charts inline.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@functools.cache
def templates() -> jinja2.Environment:
    # Jinja2 (~40 ms of imports) loads with the first page rendered, not with the routes.
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pigeon.ops", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["when"] = when
    env.filters["spark"] = sparkline
    return env


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def when(at: float | None) -> str:
    import datetime

    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(float(at), datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def sparkline(points: list[int], width: int = 180, height: int = 28) -> str:
    """An inline SVG polyline of per-minute counts (oldest minute at the left)."""
    top = max(points) if points and max(points) > 0 else 1
    step = width / max(1, len(points) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - 2 - (p / top) * (height - 4):.1f}" for i, p in enumerate(points)
    )
    return (
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="attempts per minute, last hour (max {top})">'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{coords}"/></svg>'
    )


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    body = templates().get_template(template).render(**context)
    return HTMLResponse(body, status_code=status, headers=HEADERS)


async def rendered(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """``render`` in a worker thread: a page's rendering, and the first one's Jinja2 import
    and template compiling (~50 ms for page.html), never hold the event loop."""
    return await run_in_threadpool(functools.partial(render, template, status, **context))


def base_of(conn: HTTPConnection, prefix: str) -> str:
    return str(conn.scope.get("root_path", "")).rstrip("/") + prefix


def login_page(prefix: str) -> Callable[[HTTPConnection], Awaitable[Response]]:
    """The sign-in form, answered with 401 to a browser without (valid) credentials."""
    return lambda conn: login_refused(conn, prefix, None)


async def login_refused(conn: HTTPConnection, prefix: str, error: str | None) -> Response:
    return await rendered("login.html", 401, base=base_of(conn, prefix), error=error)


async def _form(request: Request) -> dict[str, list[str]] | Response:
    """The posted form's fields, or the answer refusing it. Read into one growing buffer
    (``read_buffer``: bytes joined one chunk at a time grew quadratically, 0.8 s of the loop
    for 256 KiB sent a byte at a time) and parsed in a worker thread (percent-escapes of
    256 KiB take the parser tens of milliseconds, which the event loop must not wait for).
    Anyone may post the sign-in form."""
    body = await read_buffer(request, MAX_FORM, "a form")
    if isinstance(body, OpResult):
        text = "form too large" if body.status == 413 else "incomplete form"
        return Response(text, status_code=body.status)
    return await run_in_threadpool(_parsed, bytes(body))


def _parsed(body: bytes) -> dict[str, list[str]] | Response:
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20_000)
    except (UnicodeDecodeError, ValueError):
        return Response("bad form", status_code=400)


def _first(form: Mapping[str, list[str]], key: str) -> str:
    values = form.get(key) or [""]
    return values[0]


def _optional(form: Mapping[str, list[str]], key: str) -> str | None:
    return _first(form, key) if key in form else None


def _selection(form: Mapping[str, list[str]], scope: str) -> actions.Selection:
    max_id = _first(form, "max_id")
    ids: tuple[int, ...] = ()
    if scope == "selected":
        ids = tuple(int(v) for v in form.get("job", []) if v.isdigit())
        if not ids:
            raise InvalidOperation("select at least one job")
    return actions.Selection(
        ids=ids,
        owner=_optional(form, "owner"),
        queue=_optional(form, "queue"),
        error_class=_optional(form, "error_class"),
        max_id=int(max_id) if max_id.isdigit() else None,
    )


@dataclass(frozen=True)
class _SignIn:
    """The sign-in form's handling: the limiter first, then the credential, then the
    name; a session opened in the database, its id in the cookie."""

    prefix: str
    sessions: session.Sessions
    limiter: SignInLimiter
    guard: list[access.Guarded]

    async def handle(self, request: Request) -> Response:
        base = base_of(request, self.prefix)
        if not access.same_origin(request):
            return Response("a cross-site sign-in was refused", status_code=403)
        form = await _form(request)
        if isinstance(form, Response):
            return form
        client = client_key(request.client.host if request.client else None)
        wait = await run_in_threadpool(self.limiter.retry_after, client)
        if wait > 0:
            error = f"too many failed sign-ins: try again in {wait} s"
            refused = await rendered("login.html", 429, base=base, error=error)
            refused.headers["Retry-After"] = str(wait)
            return refused
        operator = self.guard[0].policy.operator if self.guard[0].policy else None
        if not self._is_operator(base, _first(form, "token").strip()):
            await run_in_threadpool(self.limiter.failed, client)
            return await login_refused(request, self.prefix, "that is not the operator token")
        await run_in_threadpool(self.limiter.succeeded, client)
        name = _first(form, "name").strip()[: session.MAX_NAME]
        if not name or not name.isprintable():
            return await login_refused(
                request, self.prefix, "give your name: it goes into the action log"
            )
        session_id = await run_in_threadpool(self.sessions.open, name, operator)
        response = RedirectResponse(base + "/", status_code=303)
        session.set_session(response, request, base, session_id, self.sessions.policy.lifetime)
        return response

    def _is_operator(self, base: str, token: str) -> bool:
        """Does ``token`` pass the operator check, as the header would?"""
        policy = self.guard[0].policy
        # Printable ASCII only: what an Authorization header can carry as it is.
        if not token or not token.isprintable() or not token.isascii() or policy is None:
            return False
        probe = HTTPConnection(
            {
                "type": "http",
                "method": "GET",
                "path": base + "/",
                "headers": [(b"authorization", b"Bearer " + token.encode("ascii"))],
                "query_string": b"",
            }
        )
        decided = policy.decide(access.Rule.OPERATOR, probe)
        return isinstance(decided, access.Caller) and decided.operator


def page_routes(
    db: Database,
    app: App | None = None,
    *,
    prefix: str = PAGE_PREFIX,
    sessions: SessionPolicy | None = None,
    signin_limit: SignInLimit | None = None,
) -> list[BaseRoute]:
    """The page, its actions, sign-in and sign-out, each declaring its access rule.
    ``sessions``: how long a browser stays signed in (default: from the environment,
    `SessionPolicy.from_env`); ``signin_limit``: the sign-in limiter's backoff."""
    login = login_page(prefix)
    store = session.Sessions(db, sessions or SessionPolicy.from_env())
    browser = access.BrowserLogin(session.COOKIE, login, sessions=store)
    guard: list[access.Guarded] = []

    async def page(request: Request) -> Response:
        chosen = request.query_params.get("window", "24h")
        window = WINDOWS.get(chosen, DEFAULT_WINDOW)
        view = await run_in_threadpool(overview, db, app, window=window)
        done = request.query_params.get("done", "")
        done_row = next((a for a in view["actions"] if str(a["id"]) == done), None)
        signed = session.current(request)
        return await rendered(
            "page.html",
            view=view,
            base=base_of(request, prefix),
            window=chosen if chosen in WINDOWS else "24h",
            windows=list(WINDOWS),
            refresh=REFRESH if request.query_params.get("refresh") != "0" else None,
            csrf=session.csrf_token(signed.id) if signed else "",
            signed_in=signed is not None,
            done=done_row,
        )

    async def preview(request: Request) -> Response:
        form = await _form(request)
        if isinstance(form, Response):
            return form
        if not session.csrf_ok(session.current(request), _first(form, "csrf")):
            return Response("bad CSRF token: reload the page", status_code=403)
        action, _, scope = _first(form, "do").partition(":")
        try:
            if action not in actions.ACTIONS:
                raise InvalidOperation(f"unknown action {action!r}")
            selection = _selection(form, scope)
            ids, max_id = await run_in_threadpool(actions.matching, db, selection)
        except InvalidOperation as exc:
            return await rendered(
                "message.html", 400, base=base_of(request, prefix), message=str(exc)
            )
        return await rendered(
            "confirm.html",
            base=base_of(request, prefix),
            action=action,
            selection=selection,
            ids=ids,
            max_id=max_id,
            csrf=_first(form, "csrf"),
            name=session.signed_in_name(request),
            limit=actions.MAX_JOBS,
        )

    async def apply(request: Request) -> Response:
        form = await _form(request)
        if isinstance(form, Response):
            return form
        if not session.csrf_ok(session.current(request), _first(form, "csrf")):
            return Response("bad CSRF token: reload the page", status_code=403)
        action = _first(form, "action")
        try:
            selection = _selection(form, "selected" if form.get("job") else "group")
            outcome = await run_in_threadpool(
                functools.partial(
                    actions.apply,
                    db,
                    action,
                    selection,
                    actor=_first(form, "actor"),
                    reason=_first(form, "reason"),
                )
            )
        except InvalidOperation as exc:
            return await rendered(
                "message.html", 400, base=base_of(request, prefix), message=str(exc)
            )
        target = f"{base_of(request, prefix)}/?done={outcome.action_id}#actions"
        return RedirectResponse(target, status_code=303)

    async def login_form(request: Request) -> Response:
        return await rendered("login.html", base=base_of(request, prefix), error=None)

    async def sign_out(request: Request) -> Response:
        signed = session.current(request)
        if signed is not None:  # ended on the server: a copy of the cookie opens nothing
            await run_in_threadpool(store.close, signed.id)
        response = RedirectResponse(base_of(request, prefix) + "/login", status_code=303)
        session.clear_session(response, base_of(request, prefix))
        return response

    # The page's routes are the browser's (HTML, a form, a cookie), not the API's: they stay
    # out of the OpenAPI document, which describes what a client program may call and answer.
    def html(path: str, endpoint: Callable[..., Any], method: str) -> Route:
        return Route(prefix + path, endpoint, methods=[method], include_in_schema=False)

    page_route = access.operator(html("/", page, "GET"), browser=browser)
    guard.append(page_route)
    sign_in = _SignIn(prefix, store, SignInLimiter(db, signin_limit), guard)
    return [
        page_route,
        access.operator(html("/actions/preview", preview, "POST"), browser=browser),
        access.operator(html("/actions/apply", apply, "POST"), browser=browser),
        access.operator(html("/logout", sign_out, "POST"), browser=browser),
        access.public(html("/login", login_form, "GET")),
        access.public(html("/login", sign_in.handle, "POST")),
    ]
