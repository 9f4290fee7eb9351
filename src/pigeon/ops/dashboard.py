"""The 9 a.m. dashboard, the metrics and the mountable page app: what was received, what
is still owed, who owns what failed, and whether each queue keeps its freshness objective.

``GET /pigeon/v1/dashboard`` answers in JSON, ``GET /metrics`` in Prometheus exposition,
``GET /pigeon/`` with the operations page (`pigeon.ops.web`); all three, and ``pigeon jobs
stats``, read `pigeon.ops.queries.overview` when asked: the metrics come from a custom
collector evaluated at scrape time (no counters kept in process memory, so every intake
process and node reports the same truth from the shared database).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from pigeon.jobs.app import App
from pigeon.ops.queries import DEFAULT_WINDOW, WINDOWS, overview
from pigeon.ops.web import page_routes
from pigeon.server import access
from pigeon.server.auth import Authenticator
from pigeon.server.options import SessionPolicy
from pigeon.storage.base import Database

DASHBOARD_PATH = "/pigeon/v1/dashboard"
METRICS_PATH = "/metrics"


def dashboard(
    db: Database, app: App | None = None, *, now: float | None = None, window: float | None = None
) -> dict[str, Any]:
    """The dashboard's numbers: `pigeon.ops.queries.overview`, plus each queue's
    ``service_time`` (the percentiles of the last hour's attempt durations)."""
    view = overview(
        db, app, now=time.time() if now is None else now, window=window or DEFAULT_WINDOW
    )
    for queue in view["queues"]:
        queue["service_time"] = queue["last_hour"]["durations"]
        queue["failed_owners"] = {
            g["owner"]: g["count"] for g in view["failed"]["groups"] if g["queue"] == queue["queue"]
        }
    return view


def dashboard_routes(
    db: Database,
    app: App | None = None,
    *,
    page: bool = True,
    json_path: str = DASHBOARD_PATH,
    sessions: SessionPolicy | None = None,
) -> list[BaseRoute]:
    """The JSON, ``/metrics`` and (``page``) the operations page at ``/pigeon/``, for
    operators alone (`pigeon.server.access`): the failed jobs name records and errors, the
    counts are the business's. ``sessions``: how long a browser stays signed in to the
    page (`page_routes`)."""

    @functools.cache
    def scrape() -> Callable[[], tuple[bytes, str]]:
        # prometheus_client (~20 ms of imports) loads at the first scrape, not at startup.
        from pigeon.ops.metrics import exposition

        return exposition(lambda: overview(db, app, history=False))

    async def get_dashboard(request: Request) -> Response:
        chosen = request.query_params.get("window")
        window = WINDOWS.get(chosen) if chosen else DEFAULT_WINDOW
        if window is None:
            detail = f"window is one of {', '.join(WINDOWS)}"
            return JSONResponse({"detail": detail}, status_code=400)
        return JSONResponse(await run_in_threadpool(dashboard, db, app, window=window))

    async def get_metrics(request: Request) -> Response:
        # In the thread, the first scrape's import too: it must not hold the event loop.
        body, content_type = await run_in_threadpool(lambda: scrape()())
        return Response(body, media_type=content_type)

    routes: list[BaseRoute] = [
        access.operator(Route(json_path, get_dashboard, methods=["GET"], name="pigeon_dashboard")),
        access.operator(Route(METRICS_PATH, get_metrics, methods=["GET"], name="pigeon_metrics")),
    ]
    if page:
        routes += page_routes(db, app, sessions=sessions)
    return routes


def dashboard_app(
    db: Database,
    app: App | None = None,
    *,
    operator: access.OperatorCheck,
    authenticate: Authenticator | None = None,
    metrics: bool = True,
    sessions: SessionPolicy | None = None,
) -> Starlette:
    """The page (at ``/``), its JSON (``/v1/dashboard``) and ``/metrics`` as an ASGI app of
    their own, to mount in any app: ``Mount("/ops", dashboard_app(db, jobs_app,
    operator=access.OperatorToken(token)))`` serves the page at ``/ops/``. ``operator``
    decides who is the operator (every route here is the operator's); ``authenticate``
    names your users, who get 404 like any route that is not there; ``sessions``: how long
    a browser stays signed in (`page_routes`)."""
    routes = page_routes(db, app, prefix="", sessions=sessions)
    if metrics:
        routes += dashboard_routes(db, app, page=False, json_path="/v1/dashboard")
    policy = access.AccessPolicy(authenticate or _nobody, operator=operator)
    access.bind(routes, policy)
    starlette = Starlette(routes=routes)
    starlette.router.redirect_slashes = False
    return starlette


def _nobody(conn: HTTPConnection) -> str | None:
    return None
