"""The floor for end-to-end delivery: trivial Starlette endpoints, no idempotency.

``/plain`` stores nothing; ``/sqlite`` does one synchronous=FULL SQLite insert per request.
Run by the benchmark in its own uvicorn process, as `pigeon serve` is; its database's
folder is removed when the process stops.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench._app_folder import removed_when_stopped

_folder = tempfile.mkdtemp(prefix="pigeon-floor-")
_path = os.path.join(_folder, "floor.db")
_conn = sqlite3.connect(_path, isolation_level=None, check_same_thread=False)
_conn.execute("PRAGMA journal_mode = WAL")
_conn.execute("PRAGMA synchronous = FULL")
_conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")


async def plain(request: Request) -> JSONResponse:
    body = await request.json()
    return JSONResponse({"ok": True, "id": body.get("id")}, status_code=201)


def _insert(text: str) -> None:
    _conn.execute("INSERT INTO t (body) VALUES (?)", (text,))


async def with_sqlite(request: Request) -> JSONResponse:
    body = await request.body()
    _insert(body.decode())  # synchronous on purpose: one writer, like the simplest real app
    return JSONResponse({"ok": True}, status_code=201)


app = Starlette(
    routes=[
        Route("/plain", plain, methods=["POST"]),
        Route("/sqlite", with_sqlite, methods=["POST"]),
    ],
    lifespan=removed_when_stopped(_conn, _folder),
)
