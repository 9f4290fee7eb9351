"""The reference notes app's read side: a note row as stored and as answered, the ledger,
and the app's read routes (``NotesReads``); `pigeon.reference.notes` writes the notes."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from pigeon.core.wire import ETAG, PROBLEM_JSON, quote_etag
from pigeon.ops.dashboard import dashboard_routes
from pigeon.reference import schema as ref
from pigeon.reference.answers import answers_routes
from pigeon.reference.conflicts import OUTCOMES_PATH, read_outcomes, read_resource, resource_json
from pigeon.reference.jobs import app as demo_jobs
from pigeon.reference.query import integer_param
from pigeon.server import access
from pigeon.server.options import SessionPolicy
from pigeon.server.problems import problem
from pigeon.server.records import records_routes
from pigeon.storage.base import Database, Row, Tx
from pigeon.storage.sealed import NOTE_DATA

LEDGER_PATH = "/pigeon/v1/ledger"


# notes.data is sealed when a keyring is configured, bound to the note's (principal, id).
NOTE_AD = NOTE_DATA.ad


def note_row(tx: Tx, name: str, params: dict[str, Any]) -> Row | None:
    """One note row from the named statement, its data opened."""
    row = ref.fetchone(tx, name, params)
    return None if row is None else opened(tx, row)


def opened(tx: Tx, row: Row) -> Row:
    """``row`` with its data, as stored (sealed), opened."""
    row["data"] = tx.cipher.open(row["data"], *NOTE_AD, row["principal"], row["id"])
    return row


def if_match_allows(if_match: str | None, row: Row) -> bool:
    """Does ``If-Match`` (None: none sent) allow a write of ``row``'s version? The one
    rule of the notes' writes, one by one (`pigeon.reference.notes`) and set-based."""
    return if_match is None or if_match in ("*", str(row["version"]))


def note_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "version": int(row["version"]),
        "data": json.loads(row["data"]),
        "clock": row["clock"],
        "updated_at": row["updated_at"],
    }


def read_ledger(db: Database, *, after: int = 0, limit: int = 1_000_000) -> list[Row]:
    """Every applied operation, in the order it committed (for tests and the demo)."""
    with db.reading() as tx:
        return ref.fetchall(tx, "ledger_all", {"after": after, "limit": limit})


# Bounds of the integer query parameters: a sequence number and a row count are 64-bit
# integers in both stores (beyond, PostgreSQL refused the query with a 500). A page of the
# ledger is 100,000 rows unless a larger one is asked for (the demo asks for all).
LEDGER_PAGE = 100_000


async def listing(read: Callable[[], Any]) -> Response:
    """The JSON answer of ``read()``, a list route's page, read and encoded in the thread
    pool: a page of 100,000 ledger rows is tens of megabytes of JSON, and on the event loop
    its encoding held up every other request of the process."""
    return await run_in_threadpool(lambda: JSONResponse(read()))


def _read(db: Database, fn: Callable[[Tx], Any]) -> Any:
    with db.reading() as tx:
        return fn(tx)


class NotesReads:
    """The notes app's read routes over ``db``: the caller's notes, resources and conflict
    outcomes; the ledger (operator only); records, the dashboard and /metrics. Each read
    runs in the thread pool, off the event loop."""

    def __init__(self, db: Database, sessions: SessionPolicy | None = None) -> None:
        self.db = db
        self.sessions = sessions

    def routes(self, collections: Sequence[str]) -> list[BaseRoute]:
        """The GET routes, ``/<name>/{id}`` for each settled collection among them."""
        return [
            access.user(Route("/notes", self.list_notes, methods=["GET"])),
            access.user(Route("/notes/{id}", self.get_note, methods=["GET"])),
            access.operator(Route(LEDGER_PATH, self.ledger, methods=["GET"])),
            *records_routes(self.db),
            *answers_routes(self.db),  # an answer and its grade, once graded
            # the 9 a.m. question and /metrics
            *dashboard_routes(self.db, demo_jobs, sessions=self.sessions),
            access.user(Route(OUTCOMES_PATH, self.outcomes, methods=["GET"])),
            *(
                access.user(Route(f"/{name}/{{id}}", self.get_resource(name), methods=["GET"]))
                for name in collections
            ),
        ]

    async def list_notes(self, request: Request) -> Response:
        principal = access.principal(request)

        def listed() -> dict[str, Any]:
            with self.db.reading() as tx:
                rows = ref.fetchall(tx, "note_list", {"principal": principal})
                return {"notes": [note_json(opened(tx, r)) for r in rows]}

        # Read, opened and encoded in the thread pool: a caller's every note, decrypted and
        # written as JSON, is no work for the event loop.
        return await listing(listed)

    async def get_note(self, request: Request) -> Response:
        principal = access.principal(request)
        note_id = request.path_params["id"]
        row = await run_in_threadpool(
            _read,
            self.db,
            lambda tx: note_row(tx, "note_get", {"principal": principal, "id": note_id}),
        )
        if row is None or row["deleted"]:
            body = problem(404, "no-such-note", "Not found", f"no note {note_id!r}")
            return JSONResponse(body, status_code=404, media_type=PROBLEM_JSON)
        return JSONResponse(note_json(row), headers={ETAG: quote_etag(str(row["version"]))})

    async def ledger(self, request: Request) -> Response:
        after = integer_param(request, "after", 0)
        if isinstance(after, Response):
            return after
        limit = integer_param(request, "limit", LEDGER_PAGE, 1)
        if isinstance(limit, Response):
            return limit
        return await listing(lambda: {"entries": read_ledger(self.db, after=after, limit=limit)})

    def get_resource(self, collection: str) -> Callable[[Request], Awaitable[Response]]:
        async def get(request: Request) -> Response:
            principal = access.principal(request)
            found = request.path_params["id"]
            row = await run_in_threadpool(read_resource, self.db, principal, collection, found)
            if row is None or row["deleted"]:
                body = problem(404, "no-such-resource", "Not found", f"no {collection} {found!r}")
                return JSONResponse(body, status_code=404, media_type=PROBLEM_JSON)
            etag = {ETAG: quote_etag(str(row["version"]))}
            return JSONResponse(resource_json(row), headers=etag)

        return get

    async def outcomes(self, request: Request) -> Response:
        principal = access.principal(request)
        after = integer_param(request, "after", 0)
        if isinstance(after, Response):
            return after
        return await listing(lambda: {"outcomes": read_outcomes(self.db, principal, after=after)})
