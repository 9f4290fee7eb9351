"""The raw limit of the intake: pigeon's own SQL per operation, and nothing else.

A Starlette app that runs, for each create it receives, exactly the statements the intake
and the notes handler run (the named queries claim_insert, note_create, ledger_append,
claim_complete, with a savepoint around the handler's part, on a database made by pigeon's
migrations, synchronous=FULL, one commit per request) straight on sqlite3 in the event
loop: no Intake, no routing table, no group commit, no replay, no problem documents. What
is left is the price of the storage the protocol asks for (one key claim, the effect, its
ledger row and the stored response, in one transaction) plus the least Python that can
feed it, so the pigeon server cannot beat these rows; how far below them it stays is the
cost of pigeon's own code.

Run by bench/e2e_bench.py in its own uvicorn process, as `pigeon serve` is, and driven
with the same prebuilt requests as the "server alone" ceilings. ``set_app`` writes each
batch set-based instead (bench/_raw_sets.py's ``sqlite_batch``, the named blocks the
set-based intake runs, as it runs them): the raw limit of pigeon's set-based batches.

Each process makes a database of its own, removed when it stops; with PIGEON_RAW_DB, the
processes share the file it names (made by the bench, left to it), writers taking turns
on pigeon's write lock as pigeon's own do (bench/intake_pg_bench.py's ceiling row).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench._app_folder import removed_when_stopped
from bench._raw_batch import fingerprint
from bench._raw_sets import SQLITE_SQL, migrated, sqlite_batch
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.storage.writer_lock import WriterLock

# PIGEON_RAW_DB: a file the bench made and shares among several processes of this app;
# without it, each process makes its own and removes it when it stops.
_shared = os.environ.get("PIGEON_RAW_DB")
_folder: str | None = None
if _shared:
    _path = _shared
else:
    _folder = tempfile.mkdtemp(prefix="pigeon-raw-")
    _path = os.path.join(_folder, "raw.db")
    migrated(_path)
_conn = sqlite3.connect(_path, isolation_level=None, check_same_thread=False)
_removed = removed_when_stopped(_conn, _folder)
# Writers of a shared file take turns as pigeon's do (a busy handler's sleeps would idle it).
_writer = WriterLock(_path, wait=30.0) if _shared else contextlib.nullcontext()
_conn.execute("PRAGMA journal_mode = WAL")
_conn.execute("PRAGMA synchronous = FULL")
_SQL = SQLITE_SQL
_POLICY = IdempotencyPolicy()
_HEADERS = json.dumps([])


@contextlib.contextmanager
def _transaction() -> Iterator[None]:
    """One write transaction, rolled back if the request fails (a key sent twice)."""
    with _writer:
        _conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            _conn.execute("ROLLBACK")
            raise
        _conn.execute("COMMIT")


def _apply(key: str, body: dict[str, Any], now: float) -> dict[str, Any]:
    """One create, as the intake runs it inside the request's transaction."""
    claim = {
        "principal": "anonymous",
        "idem_key": key,
        "fingerprint": fingerprint(body),
        "method": "POST",
        "path": "/notes",
        "operation_id": key,
        "lock_token": key,
        "locked_until": now + _POLICY.lock_timeout,
        "claim_expires_at": now + _POLICY.claim_retention,
        "now": now,
    }
    if _conn.execute(_SQL["claim_insert"], claim).fetchone() is None:
        raise RuntimeError(f"key {key!r} seen twice: the benchmark sends fresh keys")
    _conn.execute("SAVEPOINT op")
    data = {k: v for k, v in body.items() if k != "id"}
    note = _conn.execute(
        _SQL["note_create"],
        {"principal": "anonymous", "id": body["id"], "data": json.dumps(data), "clock": "0",
         "now": now},
    ).fetchone()  # fmt: skip
    _conn.execute(
        _SQL["ledger_append"],
        {"idempotency_key": key, "principal": "anonymous", "operation_id": key,
         "entity": f"note:{body['id']}", "method": "POST", "status": 201, "version": note[2],
         "clock": "0", "now": now},
    )  # fmt: skip
    answer = {"id": body["id"], "version": note[2], **data}
    done = _conn.execute(
        _SQL["claim_complete"],
        {"principal": "anonymous", "idem_key": key, "lock_token": key, "status": 201,
         "response_headers": _HEADERS, "response_body": json.dumps(answer),
         "body_format": "json", "now": now,
         "response_expires_at": now + _POLICY.response_retention},
    ).fetchone()  # fmt: skip
    assert done is not None
    _conn.execute("RELEASE op")
    return answer


async def single(request: Request) -> JSONResponse:
    body = json.loads(await request.body())
    with _transaction():
        answer = _apply(request.headers["idempotency-key"], body, time.time())
    return JSONResponse(answer, status_code=201)


async def batch(request: Request) -> JSONResponse:
    entries = json.loads(await request.body())["operations"]
    now = time.time()
    with _transaction():
        results = [
            {"id": e.get("id"), "status": 201, "body": _apply(e["idempotency_key"], e["body"], now)}
            for e in entries
        ]
    return JSONResponse({"results": results})


async def batch_set(request: Request) -> JSONResponse:
    entries = json.loads(await request.body())["operations"]
    now = time.time()
    with _transaction():
        results = sqlite_batch(_conn, entries, now)
    return JSONResponse({"results": results})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


app = Starlette(
    routes=[
        Route("/notes", single, methods=["POST"]),
        Route("/pigeon/v1/batch", batch, methods=["POST"]),
        Route("/pigeon/v1/health", health, methods=["GET"]),
    ],
    lifespan=_removed,
)
# The same, its batches written set-based (the set-based intake's raw limit).
set_app = Starlette(
    routes=[
        Route("/notes", single, methods=["POST"]),
        Route("/pigeon/v1/batch", batch_set, methods=["POST"]),
        Route("/pigeon/v1/health", health, methods=["GET"]),
    ],
    lifespan=_removed,
)
