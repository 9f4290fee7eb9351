"""The fault proxy injects each kind of fault, and forwards faithfully otherwise."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pigeon.exceptions import ConfigurationError
from pigeon.server.faultproxy import FaultPlan, FaultProxy


def _echo_app(seen: list[bytes]) -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        seen.append(body)
        return JSONResponse(
            {"method": request.method, "body": body.decode(), "key": request.headers.get("k")},
            status_code=201,
            headers={"ETag": '"7"'},
        )

    return Starlette(routes=[Route("/echo", echo, methods=["GET", "POST"])])


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[bytes]]]:
    seen: list[bytes] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_echo_app(seen), log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    server.should_exit = True
    thread.join(5)


def test_forwards_method_body_headers_and_status(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with FaultProxy(url) as proxy, httpx.Client(base_url=proxy.url) as client:
        for i in range(5):  # several requests on one keep-alive connection
            reply = client.post("/echo", json={"n": i}, headers={"k": f"key-{i}"})
            assert reply.status_code == 201
            assert reply.json() == {"method": "POST", "body": f'{{"n":{i}}}', "key": f"key-{i}"}
            assert reply.headers["etag"] == '"7"'
    assert len(seen) == 5
    assert proxy.counts["requests"] == 5


def test_drop_request_never_reaches_the_server(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with (
        FaultProxy(url, FaultPlan(drop_request=1.0)) as proxy,
        pytest.raises(httpx.TransportError),
    ):
        httpx.post(proxy.url + "/echo", json={})
    assert seen == []


def test_drop_response_after_the_server_ran(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with (
        FaultProxy(url, FaultPlan(drop_response=1.0)) as proxy,
        pytest.raises(httpx.TransportError),
    ):
        httpx.post(proxy.url + "/echo", json={"x": 1})
    assert seen == [b'{"x":1}']


def test_error_answers_503_without_forwarding(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with FaultProxy(url, FaultPlan(error=1.0)) as proxy:
        assert httpx.post(proxy.url + "/echo", json={}).status_code == 503
    assert seen == []


def test_duplicate_sends_twice(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with FaultProxy(url, FaultPlan(duplicate=1.0)) as proxy:
        assert httpx.post(proxy.url + "/echo", json={"d": 1}).status_code == 201
    assert seen == [b'{"d":1}', b'{"d":1}']


def test_delay_waits(upstream: tuple[str, list[bytes]]) -> None:
    url, _ = upstream
    with FaultProxy(url, FaultPlan(delay=1.0, max_delay=0.3, seed=1)) as proxy:
        started = time.monotonic()
        for _ in range(4):
            httpx.get(proxy.url + "/echo")
        assert time.monotonic() - started > 0.1
        assert proxy.counts["delay"] == 4


def test_offline_cuts_connections_and_recovers(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with FaultProxy(url) as proxy, httpx.Client(base_url=proxy.url) as client:
        proxy.set_offline(True)
        with pytest.raises(httpx.TransportError):
            client.get("/echo")
        proxy.set_offline(False)
        assert client.get("/echo").status_code == 201
    assert len(seen) == 1


def test_upstream_down_looks_like_a_network_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    with FaultProxy(dead) as proxy, pytest.raises(httpx.TransportError):
        httpx.get(proxy.url + "/echo")


def test_rates_are_validated() -> None:
    with pytest.raises(ConfigurationError, match=r"drop_request=1\.5"):
        FaultPlan(drop_request=1.5)
