"""The fault proxy injects each kind of fault, and forwards faithfully otherwise."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pigeon.exceptions import ConfigurationError
from pigeon.server.faultproxy import EXCLUSIVE_KINDS, FAULT_KINDS, FaultPlan, FaultProxy


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
    # proto IPPROTO_TCP, or asyncio leaves Nagle on and each answer waits ~40 ms for an ACK
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


def test_each_kind_fires_at_its_own_rate() -> None:
    """The three exclusive kinds share one draw; delay and duplicate keep their own rates.
    Drawn in sequence, a hit on one kind used to skip the later draws: with every kind at
    0.2 only drop_request fired on 20% of requests (down to ~12% for the last one)."""
    rng = random.Random(20240607)
    n = 200_000
    for plan in (
        FaultPlan.uniform(0.2),
        FaultPlan(drop_request=0.1, drop_response=0.3, error=0.25, delay=0.4, duplicate=0.6),
        FaultPlan.uniform(1 / 3),
    ):
        counts: Counter[str] = Counter()
        for _ in range(n):
            counts.update(plan.draw(rng).kinds)
        for kind in FAULT_KINDS:
            assert abs(counts[kind] / n - getattr(plan, kind)) < 0.005, (plan, kind, counts)


@given(
    st.lists(st.floats(0, 1), min_size=3, max_size=3),
    st.floats(0, 1),
    st.floats(0, 1),
    st.integers(0, 2**32),
)
def test_a_draw_never_combines_faults_that_exclude_each_other(
    exclusive: list[float], delay: float, duplicate: float, seed: int
) -> None:
    drop_request, error, drop_response = exclusive
    try:
        plan = FaultPlan(drop_request, drop_response, error, delay, duplicate, max_delay=0.1)
    except ConfigurationError:
        assert sum(exclusive) > 1 or duplicate > 1 - drop_request - error
        return
    rng = random.Random(seed)
    for _ in range(50):
        faults = plan.draw(rng)
        assert faults.outcome in (None, *EXCLUSIVE_KINDS)
        assert not (faults.duplicate and faults.outcome in ("drop_request", "error"))
        assert faults.delay is None or 0 <= faults.delay <= 0.1
        assert len(faults.kinds) == len(set(faults.kinds))


def test_plans_the_draw_cannot_honour_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="cannot sum above 1"):
        FaultPlan(drop_request=0.5, error=0.4, drop_response=0.2)
    with pytest.raises(ConfigurationError, match="cannot sum above 1"):
        FaultPlan.uniform(0.4)
    with pytest.raises(ConfigurationError, match="only a forwarded request"):
        FaultPlan(drop_request=0.5, error=0.3, duplicate=0.3)
    with pytest.raises(ConfigurationError, match="not between 0 and 1"):
        FaultPlan(delay=float("nan"))
    FaultPlan(drop_request=0.1, error=0.2, drop_response=0.7, duplicate=0.7)  # sums to 1


def test_the_proxy_applies_its_plan_s_rates(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    plan, n = FaultPlan.uniform(0.2, max_delay=0.0, seed=5), 2000
    with FaultProxy(url, plan) as proxy, httpx.Client(base_url=proxy.url, timeout=5) as client:
        for _ in range(n):
            with contextlib.suppress(httpx.TransportError):
                client.post("/echo", content=b"{}")
    counts = proxy.counts
    assert counts["requests"] == n
    for kind in FAULT_KINDS:  # sequential draws gave 0.2, 0.16, 0.13, 0.13, 0.13
        assert abs(counts[kind] / n - 0.2) < 0.04, dict(counts)
    # One request at a time, the seeded proxy draws exactly what the plan alone draws.
    rng, replay = random.Random(plan.seed), Counter[str]()
    for _ in range(n):
        replay.update(plan.draw(rng).kinds)
    assert replay == counts - Counter(requests=n)
    forwarded = n - counts["drop_request"] - counts["error"]
    assert len(seen) == forwarded + counts["duplicate"]
