"""The fault proxy injects each kind of fault, and forwards faithfully otherwise."""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator

import h11
import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pigeon.exceptions import ConfigurationError
from pigeon.reference.faultproxy import EXCLUSIVE_KINDS, FAULT_KINDS, FaultPlan, FaultProxy
from tests.waiting import wait_for


def _echo_app(seen: list[bytes]) -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        seen.append(body)
        return JSONResponse(
            {"method": request.method, "body": body.decode(), "key": request.headers.get("k")},
            status_code=201,
            headers={"ETag": '"7"'},
        )

    async def target(request: Request) -> JSONResponse:
        """What arrived, as raw as ASGI has it: the request line's target and the headers."""
        query = request.scope["query_string"]
        raw = request.scope["raw_path"] + (b"?" + query if query else b"")
        headers = [[k.decode(), v.decode()] for k, v in request.scope["headers"]]
        return JSONResponse({"target": raw.decode(), "headers": headers})

    async def gz(request: Request) -> Response:
        return Response(GZIPPED, headers={"content-encoding": "gzip"}, media_type="text/plain")

    async def cookies(request: Request) -> Response:
        response = Response(b"ok")
        response.set_cookie("a", "1")
        response.set_cookie("b", "2")
        response.raw_headers += [(b"x-twice", b"one"), (b"x-twice", b"two")]
        return response

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["GET", "POST"]),
            Route("/gz", gz, methods=["GET", "HEAD"]),
            Route("/cookies", cookies),
            Route("/{rest:path}", target),
        ]
    )


GZIPPED = gzip.compress(b"hello, compressed world " * 20)


def _raw(
    proxy_url: str, target: bytes, method: bytes = b"GET", headers: Iterable[tuple[str, str]] = ()
) -> tuple[h11.Response, bytes]:
    """One request with this exact target on a socket of its own: an httpx client would
    itself rewrite a target such as //host/x before the proxy saw it."""
    port = int(proxy_url.rsplit(":", 1)[1])
    conn = h11.Connection(h11.CLIENT)
    fields = [("Host", "x"), *headers, ("Connection", "close")]
    response, body = None, b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(conn.send(h11.Request(method=method, target=target, headers=fields)))
        sock.sendall(conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    assert response is not None
    return response, body


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
    wait_for(lambda: server.started, 10, "the echo server to start")
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


@pytest.mark.parametrize(
    "target",
    [b"//evil.example/x", b"/a/../b", b"/a/./b/", b"/a%2Fb/c?x=%2F&y=a+b&z=%C3%A9", b"/p?"],
)
def test_the_request_target_is_forwarded_byte_for_byte(
    upstream: tuple[str, list[bytes]], target: bytes
) -> None:
    url, _ = upstream
    with FaultProxy(url) as proxy:
        response, body = _raw(proxy.url, target)
    assert response.status_code == 200, body
    assert json.loads(body)["target"] == target.rstrip(b"?").decode()


def test_no_header_is_added_to_the_request(upstream: tuple[str, list[bytes]]) -> None:
    """httpx's default accept-encoding would let the upstream compress for a client that
    never asked for it; its user-agent would replace the client's absence of one."""
    url, _ = upstream
    with FaultProxy(url) as proxy:
        _, body = _raw(proxy.url, b"/seen", headers=[("X-A", "1"), ("X-A", "2")])
    headers = json.loads(body)["headers"]
    assert [k for k, _ in headers] == ["host", "x-a", "x-a"]
    assert [v for k, v in headers if k == "x-a"] == ["1", "2"]


def test_an_absolute_url_target_is_refused_not_forwarded(upstream: tuple[str, list[bytes]]) -> None:
    url, seen = upstream
    with FaultProxy(url) as proxy:
        for target in (url.encode() + b"/echo", b"http://example.invalid/echo"):
            response, _ = _raw(proxy.url, target)
            assert response.status_code == 400
    assert seen == [] and proxy.counts["requests"] == 0


def test_a_gzip_answer_is_forwarded_as_sent(upstream: tuple[str, list[bytes]]) -> None:
    url, _ = upstream
    with FaultProxy(url) as proxy:
        response, body = _raw(proxy.url, b"/gz")
        assert (b"content-encoding", b"gzip") in response.headers.raw_items()
        assert body == GZIPPED  # raw: not decompressed under a gzip label
        assert httpx.get(proxy.url + "/gz").content == gzip.decompress(GZIPPED)
        response, body = _raw(proxy.url, b"/gz", method=b"HEAD")
        assert body == b"" and dict(response.headers)[b"content-length"] == b"%d" % len(GZIPPED)


def test_repeated_answer_headers_stay_apart(upstream: tuple[str, list[bytes]]) -> None:
    url, _ = upstream
    with FaultProxy(url) as proxy:
        reply = httpx.get(proxy.url + "/cookies")
    assert len(reply.headers.get_list("set-cookie")) == 2
    assert dict(reply.cookies) == {"a": "1", "b": "2"}
    assert reply.headers.get_list("x-twice") == ["one", "two"]
