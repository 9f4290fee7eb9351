"""The intake on PostgreSQL survives losing its connections, without a restart.

The shared PostgreSQL server is never restarted (other tests use it): the test kills the
backends of its own database with pg_terminate_backend, and makes the database
unreachable by refusing new connections to it (ALLOW_CONNECTIONS false) while killing
the existing ones. While it is unreachable the intake fails closed (503, nothing runs);
afterwards the same process serves again and every retried key took effect once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.server import server_queries
from tests.conftest import PG_ADMIN_DSN
from tests.server.conftest import live_server

pytestmark = pytest.mark.postgres


def _dbname(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _terminate(name: str) -> int:
    """Kill every backend of the database and wait until they are gone."""
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        pids = [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        ]
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    return len(pids)


def _allow_connections(name: str, allow: bool) -> None:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')


@pytest.fixture
def quick_timeout_pg(pg_url: str) -> Iterator[PostgresDatabase]:
    """A pool on PostgreSQL with short acquire, connect and reconnect timeouts."""
    database = PostgresDatabase(
        pg_url,
        queries=server_queries("postgres"),
        min_size=2,
        acquire_timeout=1.0,
        reconnect_timeout=2.0,
        connect_timeout=2,
    )
    yield database
    _allow_connections(_dbname(pg_url), True)  # so the fixture can drop it
    database.close()


def _post(client: httpx.Client, key: str) -> httpx.Response:
    return client.post("/notes", json={"id": key, "t": key}, headers={"Idempotency-Key": key})


def test_terminated_backends_are_replaced_and_no_request_notices(
    quick_timeout_pg: PostgresDatabase, pg_url: str
) -> None:
    app = create_notes_app(quick_timeout_pg, purge_interval=None)
    with live_server(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        assert _post(client, "before").status_code == 201
        assert _terminate(_dbname(pg_url)) >= 1
        # The pool's checkout check finds the dead connections and opens new ones.
        statuses = [_post(client, f"after-{i}").status_code for i in range(5)]
        assert statuses == [201] * 5
        assert _post(client, "before").headers["idempotent-replayed"] == "true"
    assert len(read_ledger(quick_timeout_pg)) == 6


def test_unreachable_database_fails_closed_then_recovers_without_restart(
    quick_timeout_pg: PostgresDatabase, pg_url: str
) -> None:
    name = _dbname(pg_url)
    app = create_notes_app(quick_timeout_pg, purge_interval=None)
    with live_server(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        assert _post(client, "k0").status_code == 201
        _allow_connections(name, False)
        _terminate(name)
        started = time.monotonic()
        down = [_post(client, f"k{i}") for i in range(1, 4)]
        assert [r.status_code for r in down] == [503] * 3
        assert all(r.headers["retry-after"] for r in down)
        assert down[0].json()["type"].endswith("store-unavailable")
        assert time.monotonic() - started < 10  # each waits acquire_timeout, not forever
        batch = client.post(
            "/pigeon/v1/batch",
            json={
                "operations": [
                    {
                        "idempotency_key": "b1",
                        "method": "POST",
                        "path": "/notes",
                        "body": {"id": "b1"},
                    }
                ]
            },
        )
        assert batch.status_code == 503

        _allow_connections(name, True)
        deadline = time.monotonic() + 15
        while (response := _post(client, "k1")).status_code == 503:
            assert time.monotonic() < deadline, "the intake did not recover"
            time.sleep(0.2)
        assert response.status_code == 201
        for key in ("k1", "k2", "k3"):  # the keys refused while down: each runs once now
            assert _post(client, key).status_code == 201
    ledger = read_ledger(quick_timeout_pg)
    assert sorted(row["idempotency_key"] for row in ledger) == ["k0", "k1", "k2", "k3"]


def test_pool_connections_notice_a_silent_peer(quick_timeout_pg: PostgresDatabase) -> None:
    # A partition drops packets without a reset: without keepalives and tcp_user_timeout a
    # request on such a connection hangs for TCP's ~15 minutes instead of failing closed.
    with quick_timeout_pg.pool.connection() as conn:
        dsn = psycopg.conninfo.conninfo_to_dict(conn.info.dsn)
    assert dsn["keepalives"] == "1"
    assert int(dsn["tcp_user_timeout"]) == 15_000
    assert int(dsn["keepalives_idle"]) * 3 <= 15


def test_network_timeout_must_be_positive(pg_url: str) -> None:
    from pigeon.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="network_timeout"):
        PostgresDatabase(pg_url, queries=server_queries("postgres"), network_timeout=0)
