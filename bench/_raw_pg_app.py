"""The raw limit of the set-based intake on PostgreSQL: pigeon's own SQL, and nothing else.

The twin of ``set_app`` in bench/_raw_intake_app.py for the database PIGEON_RAW_DB names
(made beforehand by pigeon's and the reference app's migrations): each batch of creates
runs the named blocks the set-based intake runs on PostgreSQL (the keys read, the notes,
the ledger rows, the claims completed with their answers) in one transaction of psycopg,
prepared as pigeon's are, in two round trips where pigeon takes three (the keys read goes
with the notes, the last two statements with the COMMIT). Each request runs in a thread
of its own connection, so a process keeps several batches in PostgreSQL at once, as
`pigeon serve` does. No Intake, routing, validation or problem documents: what is left is
PostgreSQL's price for the protocol's rows plus the least Python that can feed it, so
pigeon on PostgreSQL cannot beat these rows.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench._raw_batch import answered, planned
from pigeon.reference.schema import REFERENCE
from pigeon.server.idempotency import CLAIM_WAIT, IdempotencyPolicy
from pigeon.storage.server import server_queries

_URL = os.environ["PIGEON_RAW_DB"]
_SQL = {**server_queries("postgres"), **REFERENCE.queries("postgres")}
_POLICY = IdempotencyPolicy()
_WAIT = f"{round(CLAIM_WAIT * 1000)}ms"  # as the intake bounds a key's wait
_local = threading.local()


def _conn() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = psycopg.connect(_URL)
    return conn


def _apply_set(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch of creates, as bench/_raw_intake_app.py's ``_apply_set`` writes it."""
    claims, notes, datas = planned(entries)
    conn, now = _conn(), time.time()
    mine = {"principal": "anonymous", "now": now}
    with conn.pipeline() as pipeline, conn.transaction():
        keys = json.dumps([c[0] for c in claims])
        seen = conn.execute(_SQL["claims_get_many"], {**mine, "keys": keys})
        created = conn.execute(_SQL["notes_create_many"], {**mine, "notes": json.dumps(notes)})
        pipeline.sync()
        if seen.fetchall():
            raise RuntimeError("a key seen twice: the benchmark sends fresh keys")
        made = {note_id: version for note_id, version, _ in created.fetchall()}
        ledger, answers, out = answered(entries, datas, made)
        stored = [[*claim, 201, "[]", text] for claim, text in zip(claims, answers, strict=True)]
        conn.execute(_SQL["ledger_append_many"], {**mine, "rows": json.dumps(ledger)})
        conn.execute(
            _SQL["claims_store_many"],
            {**mine, "claims": json.dumps(stored), "claim_wait": _WAIT, "created_at": now,
             "response_expires_at": now + _POLICY.response_retention,
             "claim_expires_at": now + _POLICY.claim_retention},
        )  # fmt: skip
    return out


async def batch(request: Request) -> JSONResponse:
    entries = json.loads(await request.body())["operations"]
    return JSONResponse({"results": await run_in_threadpool(_apply_set, entries)})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


app = Starlette(
    routes=[
        Route("/pigeon/v1/batch", batch, methods=["POST"]),
        Route("/pigeon/v1/health", health, methods=["GET"]),
    ]
)
