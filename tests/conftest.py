"""Shared fixtures: PostgreSQL databases per test, the brokers, a hand-moved clock.

PostgreSQL tests use the server named by PIGEON_TEST_PG_DSN (default: the local one on
127.0.0.1:5432, user postgres). Where it cannot be reached they are skipped with a message
saying so — unless PIGEON_REQUIRE_PG=1 (CI sets it), where they fail instead.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import settings

from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.server import server_queries
from tests.clocks import FakeClock
from tests.pgdatabases import Databases
from tests.pgwire import RoundTrips, relay_for, relayed_url

# Every process a test starts is recorded there and killed with its group, however the
# run ends (tests/processes.py); each test is marked with its tier (tests/tiers.py); the
# server databases are fixtures of tests/databases.py; every httpx client of the process
# shares one default SSL context (tests/sslcontext.py).
pytest_plugins = ["tests.processes", "tests.tiers", "tests.databases", "tests.sslcontext"]

PG_ADMIN_DSN = os.environ.get("PIGEON_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("PIGEON_REQUIRE_PG") == "1"

# The CLI's tables are read by substring: a wide console, so that no cell is folded,
# whatever the terminal of the run or of a pytest-xdist worker (whose stdio is a pipe).
os.environ["COLUMNS"] = "1000"

# No per-example deadline: on a shared 2-core machine an example's wall time measures the
# neighbours. Property tests bound their sizes instead; pytest-timeout bounds the test.
settings.register_profile("pigeon", deadline=None)
settings.load_profile("pigeon")

_pg_error: str | None = None
_pg_checked = False


def _pg_unreachable() -> str | None:
    global _pg_checked, _pg_error
    if not _pg_checked:
        _pg_checked = True
        try:
            psycopg.connect(PG_ADMIN_DSN, connect_timeout=3).close()
        except psycopg.Error as exc:
            _pg_error = (
                f"PostgreSQL not reachable at {PG_ADMIN_DSN} ({exc}); set PIGEON_TEST_PG_DSN"
            )
    return _pg_error


def require_postgres() -> None:
    error = _pg_unreachable()
    if error is not None:
        if REQUIRE_PG:
            pytest.fail(f"PIGEON_REQUIRE_PG=1 but {error}")
        pytest.skip(error)


# The brokers the relay tests publish to (CI's .ci/run starts them when they are down).
BROKERS = {
    "redis": os.environ.get("PIGEON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "nats": os.environ.get("PIGEON_TEST_NATS_URL", "nats://127.0.0.1:4222"),
    "amqp": os.environ.get("PIGEON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
}
_broker_errors: dict[str, str | None] = {}


def _broker_unreachable(kind: str) -> str | None:
    if kind not in _broker_errors:
        from urllib.parse import urlsplit

        url = BROKERS[kind]
        parts = urlsplit(url)
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=3).close()
            _broker_errors[kind] = None
        except OSError as exc:
            _broker_errors[kind] = (
                f"{kind} broker not reachable at {url} ({exc}); set PIGEON_TEST_{kind.upper()}_URL"
            )
    return _broker_errors[kind]


def require_broker(kind: str) -> str:
    """The URL of the ``kind`` broker (redis, nats, amqp); skips the test if it does not
    answer, or fails it under PIGEON_REQUIRE_PG=1 (CI), as ``require_postgres`` does."""
    error = _broker_unreachable(kind)
    if error is not None:
        if REQUIRE_PG:
            pytest.fail(f"PIGEON_REQUIRE_PG=1 but {error}")
        pytest.skip(error)
    return BROKERS[kind]


DATABASES = Databases(PG_ADMIN_DSN)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """An empty PostgreSQL database for one test, emptied after it for the next one."""
    require_postgres()
    url = DATABASES.create("pigeon_t_")
    yield url
    DATABASES.release(url)


@pytest.fixture
def pg_relay(pg_url: str) -> Iterator[RoundTrips]:
    """A relay in front of the test's database that can fail as a network does
    (``cut``, ``stall``, ``restore``: `tests.pgwire`)."""
    relay = relay_for(pg_url)
    yield relay
    relay.close()


@pytest.fixture
def pg_relayed(pg_url: str, pg_relay: RoundTrips) -> Iterator[PostgresDatabase]:
    """The test's database through ``pg_relay``, with the pool's default waits (10 s for
    a connection, 15 s of silence before a connection is declared dead)."""
    db = PostgresDatabase(relayed_url(pg_url, pg_relay), queries=server_queries("postgres"))
    yield db
    db.close()


def pytest_sessionfinish() -> None:
    DATABASES.drop_all()


@pytest.fixture
def clock() -> FakeClock:
    """A hand-moved clock, for whatever the test hands a ``clock`` / ``now`` callable."""
    return FakeClock()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _pg_error is not None and not REQUIRE_PG:
        terminalreporter.write_sep("!", f"PostgreSQL tests SKIPPED: {_pg_error}", yellow=True)
    for error in _broker_errors.values():
        if error is not None and not REQUIRE_PG:
            terminalreporter.write_sep("!", f"broker tests SKIPPED: {error}", yellow=True)
