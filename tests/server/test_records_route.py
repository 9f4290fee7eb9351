"""The records route served by real uvicorn on a loopback port, read with real httpx."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from pigeon.jobs import records
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.server import access
from pigeon.server.auth import BearerAuth
from pigeon.server.records import records_routes
from pigeon.storage.base import Database, Tx
from pigeon.storage.server import open_server_db
from tests.waiting import wait_for

from .conftest import OPERATOR, live_server, operator_token


def guarded(routes: list[Any]) -> list[Any]:
    """The routes bound to an access policy, as create_app binds its own."""
    access.bind(routes, access.AccessPolicy(BearerAuth(), operator=operator_token()))
    return routes


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Database]]:
    notes_db = open_server_db(tmp_path / "s.db")
    with live_server(Starlette(routes=guarded(records_routes(notes_db)))) as url:
        yield url, notes_db
    notes_db.close()


def test_record_states_over_http(served: tuple[str, Database]) -> None:
    base, notes_db = served
    with notes_db.transaction() as tx:
        rid = records.accept(
            tx,
            kind="answer",
            data={"answer": "42"},
            obligations={"grading": JobSpec("grading", "grade")},
        )
    # Accepted without a principal (outside the intake): the operators' record.
    body = httpx.get(f"{base}/pigeon/v1/records/{rid}", headers=OPERATOR).json()
    assert (body["status"], body["pending"], body["data"]) == (
        "received",
        ["grading"],
        {"answer": "42"},
    )
    m = JobManager(notes_db)
    (job,) = m.lease_jobs("grading", "w", 1, lease=10)
    m.finish([AttemptOutcome(job)])
    body = httpx.get(f"{base}/pigeon/v1/records/{rid}", headers=OPERATOR).json()
    assert body["status"] == "completed" and body["pending"] == []
    assert [e["state"] for e in body["events"]] == [
        "accepted",
        "attempt",
        "obligation_completed",
        "completed",
    ]


def test_unknown_record_is_a_problem_404(served: tuple[str, Database]) -> None:
    base, _ = served
    response = httpx.get(f"{base}/pigeon/v1/records/nope", headers=OPERATOR)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "nope" in response.json()["detail"]


class SlowDatabase:
    """The real database, each transaction first waiting ``delay`` seconds: a busy store
    (a pool with no free connection, a slow disk). ``waiting`` is set once a transaction
    has begun that wait."""

    def __init__(self, inner: Database, delay: float) -> None:
        self.inner, self.delay, self.backend = inner, delay, inner.backend
        self.cipher = inner.cipher
        self.waiting = threading.Event()

    @contextlib.contextmanager
    def transaction(self, **options: Any) -> Iterator[Tx]:
        self.waiting.set()
        time.sleep(self.delay)
        with self.inner.transaction(**options) as tx:  # type: ignore[call-arg]
            yield tx

    @contextlib.contextmanager
    def reading(self) -> Iterator[Tx]:
        self.waiting.set()
        time.sleep(self.delay)
        with self.inner.reading() as tx:
            yield tx

    def close(self) -> None:
        self.inner.close()


def test_a_slow_record_read_does_not_stall_the_server(tmp_path: Path) -> None:
    """The route read the database on the event loop: while one record read waited on
    the store, no other request of the process (health probes, writes) was answered."""

    async def health(request: Any) -> Any:
        return PlainTextResponse("ok")

    notes_db = open_server_db(tmp_path / "s.db")
    slow = SlowDatabase(notes_db, 1.0)
    app = Starlette(routes=[*guarded(records_routes(slow)), Route("/health", health)])
    with live_server(app) as url, ThreadPoolExecutor(1) as pool:
        nope = f"{url}/pigeon/v1/records/nope"
        reading = pool.submit(httpx.get, nope, headers=OPERATOR, timeout=10)
        wait_for(slow.waiting.is_set, 5, "the record read to wait on the store")
        started = time.monotonic()
        assert httpx.get(f"{url}/health", timeout=10).text == "ok"
        waited = time.monotonic() - started
        assert reading.result().status_code == 404
    notes_db.close()
    assert waited < 0.5, f"the health probe waited {waited:.2f} s behind a record read"
