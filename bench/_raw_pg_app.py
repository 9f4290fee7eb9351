"""The raw limit of the set-based intake on PostgreSQL: pigeon's own SQL, and nothing else.

The twin of ``set_app`` in bench/_raw_intake_app.py for the database PIGEON_RAW_DB names
(made beforehand by pigeon's and the reference app's migrations): each batch of creates
runs the named blocks the set-based intake runs on PostgreSQL in one transaction of
psycopg (bench/_raw_sets.py's ``postgres_batch``: two round trips where pigeon takes
three). Each request runs in a thread
of its own connection, so a process keeps several batches in PostgreSQL at once, as
`pigeon serve` does. No Intake, routing, validation or problem documents: what is left is
PostgreSQL's price for the protocol's rows plus the least Python that can feed it, so
pigeon on PostgreSQL cannot beat these rows.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench._raw_sets import postgres_batch

_URL = os.environ["PIGEON_RAW_DB"]
_local = threading.local()


def _conn() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = psycopg.connect(_URL)
    return conn


def _apply(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return postgres_batch(_conn(), entries)


async def batch(request: Request) -> JSONResponse:
    entries = json.loads(await request.body())["operations"]
    return JSONResponse({"results": await run_in_threadpool(_apply, entries)})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


app = Starlette(
    routes=[
        Route("/pigeon/v1/batch", batch, methods=["POST"]),
        Route("/pigeon/v1/health", health, methods=["GET"]),
    ]
)
