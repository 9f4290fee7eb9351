"""Round trips of `pigeon serve` to PostgreSQL, counted on the wire: the server's database
URL points at the counting relay of ``tests/pgwire.py`` in front of the real server, as
``bench/fastapi_bench.py`` counts its handlers'. One intake process (``--workers 1``),
warmed first, so every turn counted is the request's own, as it is in steady state."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import psycopg
from tests.pgwire import Counts, RoundTrips

from pigeon.demo.processes import ServerProcess

# Requests of each kind before counting: the pool's connections are open, and psycopg has
# prepared the statements it runs a sixth time (a turn each, once per connection).
WARM = 8


def relayed(url: str, relay: RoundTrips) -> str:
    """``url`` with its host and port replaced by the relay's."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    user, dbname = info.get("user", "postgres"), info["dbname"]
    return f"postgresql://{user}@127.0.0.1:{relay.port}/{dbname}"


def single(client: httpx.Client) -> int:
    key = uuid.uuid4().hex
    body = {"id": key, "title": "shopping list", "body": "milk, eggs"}
    return client.post("/notes", json=body, headers={"Idempotency-Key": key}).status_code


def batch(size: int) -> Callable[[httpx.Client], int]:
    def send(client: httpx.Client) -> int:
        ops = [
            {
                "idempotency_key": uuid.uuid4().hex,
                "method": "POST",
                "path": "/notes",
                "body": {"id": uuid.uuid4().hex, "title": "shopping list", "body": "milk"},
            }
            for _ in range(size)
        ]
        return client.post("/pigeon/v1/batch", json={"operations": ops}).status_code

    return send


def round_trips(url: str, requests: dict[str, Callable[[httpx.Client], int]]) -> dict[str, Counts]:
    """The turns and statements of one request of each of ``requests`` (name -> send, a
    2xx expected) against a server on the PostgreSQL database ``url``."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    relay = RoundTrips((info.get("host", "127.0.0.1"), int(info.get("port", 5432))))
    counts: dict[str, Counts] = {}
    try:
        server = ServerProcess(
            relayed(url, relay), extra_args=["--workers", "1"], allow_anonymous=True
        )
        with server, httpx.Client(base_url=server.url, timeout=60) as client:
            for name, send in requests.items():
                for _ in range(WARM):
                    send(client)
                with relay.counting() as counted:
                    status = send(client)
                if not 200 <= status < 300:
                    raise RuntimeError(f"{name}: answered {status}")
                counts[name] = counted
        return counts
    finally:
        relay.close()
