"""A user's own app for ``pigeon serve --app tests.cli.orders_app:make``: orders in a table
of its own, written in the intake's transaction, made by a factory from the options the
command hands it. ``GET /served`` (the operator's) tells which process answered and what
it was given: the tests' window into each worker process.

The other names are what ``--app`` must refuse or serve as they are."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pigeon.server import Intake, IntakeContext, ServerOptions, access, create_app
from pigeon.storage.base import Database

ORDER = {
    "type": "object",
    "required": ["id", "item"],
    "properties": {"id": {"type": "string"}, "item": {"type": "string"}},
}


def place_order(ctx: IntakeContext) -> tuple[int, Any]:
    ctx.tx.sql(
        "INSERT INTO shop_orders (principal, id, item) VALUES (:principal, :id, :item)",
        {"principal": ctx.principal, "id": ctx.body["id"], "item": ctx.body["item"]},
    )
    return 201, {"id": ctx.body["id"], "item": ctx.body["item"], "pid": os.getpid()}


def make(options: ServerOptions) -> Starlette:
    db = options.open_db()
    with db.transaction() as tx:
        tx.sql(
            "CREATE TABLE IF NOT EXISTS shop_orders "
            "(principal TEXT, id TEXT, item TEXT, PRIMARY KEY (principal, id))"
        )
    intake = Intake(db, options.intake)
    intake.add_operation("POST", "/orders", place_order, request_schema=ORDER)
    routes = [
        access.user(Route("/orders", _orders(db), methods=["GET"])),
        access.operator(Route("/served", _served(options), methods=["GET"])),
    ]
    return create_app(intake, options, routes=routes, title="shop")


def _orders(db: Database) -> Any:
    async def orders(request: Request) -> Response:
        principal = access.principal(request)
        with db.transaction() as tx:
            rows = tx.sql(
                "SELECT id, item FROM shop_orders WHERE principal = :p ORDER BY id",
                {"p": principal},
            ).fetchall()
        return JSONResponse({"orders": rows})

    return orders


def _served(options: ServerOptions) -> Any:
    secret = (options.auth.jwt_secret or "").encode()

    async def served(request: Request) -> Response:
        return JSONResponse(
            {
                "pid": os.getpid(),
                "options": repr(options),
                "secret_sha256": hashlib.sha256(secret).hexdigest(),
                "serve_environ": sorted(k for k in os.environ if k.startswith("PIGEON_SERVE")),
            }
        )

    return served


async def ping(request: Request) -> Response:
    return JSONResponse({"pong": True})


# An ASGI app built before any option existed: served as it is.
ready = Starlette(routes=[Route("/ping", ping)])


def two_arguments(options: ServerOptions, extra: str) -> Starlette:
    return ready


def not_an_app(options: ServerOptions) -> dict[str, str]:
    return {"not": "an app"}
