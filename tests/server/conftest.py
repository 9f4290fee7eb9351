"""Fixtures for the intake tests: real SQLite files, a settable clock, live uvicorn."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.types import ASGIApp

from pigeon.demo.processes import serve_in_thread
from pigeon.reference.notes import create_note, create_notes_app
from pigeon.reference.schema import attach
from pigeon.server.access import OperatorToken
from pigeon.server.intake import IntakeContext
from pigeon.server.options import ServerOptions
from pigeon.storage.base import Database, Tx
from tests.clocks import FakeClock
from tests.databases import opened

with warnings.catch_warnings():
    # Starlette's TestClient runs on httpx here; its nudge towards another client is noise.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

__all__ = [
    "OPERATOR",
    "OPERATOR_TOKEN",
    "SERVER_START",
    "CountingDatabase",
    "NotesClient",
    "TestClient",
    "failing_handler",
    "live_server",
    "operator_token",
]

# The operator credential of the tests' apps (pigeon.server.access): the dashboard, the
# ledger and /metrics answer only to it.
OPERATOR_TOKEN = "operator-token-of-the-tests-0123456789"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

# Where the intake tests' clock starts: a present-day time (November 2023), as the
# stored claims' and responses' timestamps would be.
SERVER_START = 1_700_000_000.0


class CountingDatabase:
    """The real database, counting the transactions that committed."""

    def __init__(self, inner: Database) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.cipher = inner.cipher
        self.commits = 0

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.inner.transaction() as tx:
            yield tx
        self.commits += 1

    def reading(self) -> contextlib.AbstractContextManager[Tx]:
        return self.inner.reading()  # nothing to commit

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def notes_db(server_db_url: str) -> Iterator[Database]:
    """The server database on each backend with the reference notes app's tables: these
    tests drive its handlers (create_note, ...) on intakes of their own."""
    yield from _with_notes(server_db_url)


@pytest.fixture
def notes_pg(pg_url: str) -> Iterator[Database]:
    """``notes_db`` on PostgreSQL alone, for what only that backend can do."""
    yield from _with_notes(pg_url)


NotesClient = Callable[..., TestClient]


@pytest.fixture
def notes_client(notes_db: Database) -> Iterator[NotesClient]:
    """Makes the reference notes app on ``notes_db`` with the options given (no purge
    thread unless asked) and a client of it, started (lifespan) and closed with the test."""
    with contextlib.ExitStack() as clients:

        def make(options: ServerOptions | None = None, **settings: Any) -> TestClient:
            app = create_notes_app(notes_db, options, **({"purge_interval": None} | settings))
            return clients.enter_context(TestClient(app))

        yield make


def _with_notes(url: str) -> Iterator[Database]:
    for database in opened(url):
        attach(database)  # the reference app's schema component, its own tables
        yield database


@pytest.fixture
def server_clock() -> FakeClock:
    """The hand-moved clock at a present-day time (``SERVER_START``), as the intake's stored
    claims and responses would be stamped."""
    return FakeClock(SERVER_START)


def failing_handler(kind: str) -> Callable[[IntakeContext], Any]:
    """Writes a note first, then fails the way ``kind`` says (the write must not survive)."""

    def handler(ctx: IntakeContext) -> Any:
        create_note(ctx)
        if kind == "raise":
            raise RuntimeError("handler blew up after writing")
        if kind == "5xx":
            return 503, {"detail": "downstream unavailable"}
        return 409, {"detail": "refused after writing"}

    return handler


def operator_token() -> OperatorToken:
    return OperatorToken(OPERATOR_TOKEN)


def live_server(app: ASGIApp) -> contextlib.AbstractContextManager[str]:
    """A real uvicorn on an ephemeral loopback port, in a thread; yields its base URL."""
    return serve_in_thread(app)
