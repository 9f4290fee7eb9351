"""The servers the chaos test (tests/test_chaos.py) runs against, one entry each.

A chaos server is a separate process that the test SIGKILLs and starts again on the same
port, and that says which operations took effect, in the order they did, from its own
record of them: the reference app through its ledger route, an application from its own
table, read directly from its database. Another server joins the test with one entry in
``SERVERS``: how to make it (from the test's fixtures) and how many operations each
mode of the client sends it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import pytest
from sqlalchemy import create_engine, text

from pigeon.orphans import child_env
from tests import processes
from tests.integrations.django_notes import DjangoNotes
from tests.integrations.orders_app import sqlalchemy_url
from tests.processes import ServerProcess
from tests.waiting import until_answers

ROOT = Path(__file__).parent.parent


class ChaosServer(Protocol):
    """What the chaos test does to a server, and asks of it at the end."""

    @property
    def url(self) -> str: ...

    @property
    def kills(self) -> int: ...

    def start(self) -> ChaosServer: ...

    def kill(self) -> None:
        """SIGKILL, no cleanup; ``start`` brings it back on the same port."""
        ...

    def stop(self) -> None: ...

    def effects(self) -> list[str]:
        """The idempotency key of every write that took effect, in the order they did."""
        ...


def _ledger(url: str, query: str) -> list[str]:
    """The idempotency keys ``query`` reads from the database at ``url`` (SQLAlchemy's)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [str(key) for (key,) in conn.execute(text(query))]
    finally:
        engine.dispose()


class ReferenceServer(ServerProcess):
    """``pigeon serve``'s reference notes app; its effects from ``/pigeon/v1/ledger``."""

    def effects(self) -> list[str]:
        reply = httpx.get(
            self.url + "/pigeon/v1/ledger", params={"limit": 10**7}, headers=self.operator_headers
        )
        reply.raise_for_status()
        return [row["idempotency_key"] for row in reply.json()["entries"]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class AppServer:
    """An application's own server process (``command`` and ``--port PORT``), serving
    the notes contract on ``database`` (a SQLAlchemy URL, in ``DATABASE_URL``); its
    effects are the rows of ``ledger`` (a query answering idempotency keys in order)."""

    command: list[str]
    database: str
    ledger: str
    ready_path: str = "/openapi.json"
    startup_timeout: float = 60.0
    port: int = field(default_factory=_free_port)
    kills: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AppServer:
        env = child_env() | {"DATABASE_URL": self.database}
        args = [*self.command, "--port", str(self.port)]
        self._proc = processes.spawn(
            args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        until_answers(self.url + self.ready_path, self.startup_timeout, proc=self._proc)
        return self

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self.kills += 1

    def stop(self) -> None:
        if self._proc is not None:
            processes.stop(self._proc)

    def effects(self) -> list[str]:
        return _ledger(self.database, self.ledger)


class DjangoServer(DjangoNotes):
    """examples/django_notes (``manage.py serve``); its effects from its ``notes_effect``."""

    def effects(self) -> list[str]:
        query = "SELECT idempotency_key FROM notes_effect ORDER BY seq"
        return _ledger(sqlalchemy_url(str(self.db)), query)


def pigeon_serve(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosServer:
    return ReferenceServer(tmp_path / "server.db", allow_anonymous=True)


def django_notes(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosServer:
    """examples/django_notes on SQLite."""
    return DjangoServer(tmp_path / "server.db", allow_anonymous=True)


def fastapi_orders(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosServer:
    """examples/fastapi_orders on PostgreSQL; its effects from its ``note_effects``."""
    url: str = request.getfixturevalue("pg_url")
    return AppServer(
        [sys.executable, "-m", "examples.fastapi_orders.app"],
        sqlalchemy_url(url),
        "SELECT idempotency_key FROM note_effects ORDER BY seq",
    )


@dataclass(frozen=True)
class Entry:
    """``make``: the server (not started yet), from the test's fixtures. ``ops``: the
    operations each client mode sends it (a mode left out is not run against it).
    ``marks``: the test's marks against it (``postgres`` where it needs the server)."""

    make: Callable[[pytest.FixtureRequest, Path], ChaosServer]
    ops: dict[str, int]
    marks: tuple[pytest.MarkDecorator, ...] = ()


SERVERS: dict[str, Entry] = {
    # The chaos run is the batch one; the concurrent one (a request per
    # operation, about twice the wall time per operation) runs half as many.
    "pigeon_serve": Entry(pigeon_serve, {"batches": 5000, "concurrent": 2500}),
    # The applications (a transaction per operation, their framework's request cycle):
    # fewer, at least the thousand the proof asks for, to keep CI short. The FastAPI
    # example's concurrent run (1,000, passing) costs as much CPU again as its batch one;
    # its concurrency is checked by the integration's own tests (fifty duplicates).
    "fastapi_orders": Entry(fastapi_orders, {"batches": 1000}, (pytest.mark.postgres,)),
    "django_notes": Entry(django_notes, {"batches": 1500, "concurrent": 1000}),
}
