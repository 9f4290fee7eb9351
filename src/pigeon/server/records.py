"""``GET /pigeon/v1/records/{id}``: a record's accepted data and every recorded state since.

Read-only and keyless: ``create_app(intake, routes=records_routes(db))`` mounts it. The
answer is the current approved state (``received`` with its pending obligations, or
``completed``), never an invented result.

An ``owner`` route (`pigeon.server.access`): the principal that created the record reads
it, and so does an operator. Anyone else gets the 404 of a record that does not exist,
word for word, so an id learnt elsewhere (a log, a dashboard, a guess) confirms nothing.
A record accepted without a principal (written outside the intake) is the operator's.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from pigeon.core.wire import PROBLEM_JSON
from pigeon.exceptions import NotFound
from pigeon.jobs import records
from pigeon.server import access
from pigeon.storage.base import Database

RECORDS_PATH = "/pigeon/v1/records/{record_id}"


def records_routes(db: Database) -> list[BaseRoute]:
    async def get_record(request: Request) -> JSONResponse:
        record_id = request.path_params["record_id"]
        caller = access.caller(request)
        # An operator reads any record; a user only those it created.
        owner = None if caller.operator else caller.principal
        try:
            # In a worker thread: a read waiting on the store (a busy pool, a slow disk)
            # must not hold up the event loop, and with it every other request.
            view = await run_in_threadpool(records.get, db, record_id, principal=owner)
        except NotFound as exc:
            return JSONResponse(
                {"type": "about:blank", "title": "Not Found", "status": 404, "detail": str(exc)},
                status_code=404,
                media_type=PROBLEM_JSON,
            )
        return JSONResponse(view)

    route = Route(RECORDS_PATH, get_record, methods=["GET"], name="pigeon_record")
    return [access.owner(route)]
