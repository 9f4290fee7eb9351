"""A fault-injecting HTTP proxy for the demo and the chaos tests.

It sits between a client and a pigeon server on loopback and, per request, may:

- ``drop_request``: close the connection without forwarding (the server never saw it);
- ``drop_response``: forward, let the server commit, then close the connection without
  answering (the client cannot know it happened: the case idempotency keys exist for);
- ``error``: answer 503 itself without forwarding;
- ``delay``: wait up to ``max_delay`` seconds before forwarding;
- ``duplicate``: forward the request twice, concurrently, and answer with one of the two.

It can also be switched ``offline`` (every connection is closed at once: the tunnel).
Requests are parsed with h11 (the HTTP/1.1 state machine uvicorn uses) and forwarded with
httpx; the proxy runs its own event loop in a background thread so that synchronous tests
and the demo can drive it.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

import h11
import httpx

from pigeon.exceptions import ConfigurationError

FAULT_KINDS = ("drop_request", "drop_response", "error", "delay", "duplicate")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(frozen=True)
class FaultPlan:
    """Probability of each fault per request (each drawn independently, in this order)."""

    drop_request: float = 0.0
    drop_response: float = 0.0
    error: float = 0.0
    delay: float = 0.0
    duplicate: float = 0.0
    max_delay: float = 0.05
    seed: int | None = None

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            rate = getattr(self, kind)
            if not 0.0 <= rate <= 1.0:
                raise ConfigurationError(f"fault rate {kind}={rate} is not between 0 and 1")
        if self.max_delay < 0:
            raise ConfigurationError(f"max_delay={self.max_delay} must not be negative")

    @classmethod
    def uniform(cls, rate: float, *, max_delay: float = 0.05, seed: int | None = None) -> FaultPlan:
        return cls(rate, rate, rate, rate, rate, max_delay=max_delay, seed=seed)


@dataclass
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""


@dataclass
class FaultProxy:
    """``with FaultProxy(upstream, plan) as proxy: httpx.get(proxy.url + "/notes")``."""

    upstream: str
    plan: FaultPlan = field(default_factory=FaultPlan)
    host: str = "127.0.0.1"
    port: int = 0
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.plan.seed)
        self._offline = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # -- control (any thread) -------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set_offline(self, offline: bool) -> None:
        """Offline: refuse every request and cut every open connection (a tunnel)."""
        self._offline = offline
        if offline and self._loop is not None:
            self._loop.call_soon_threadsafe(self._cut_all)

    def set_plan(self, plan: FaultPlan) -> None:
        self.plan = plan

    def start(self) -> FaultProxy:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- event loop side -------------------------------------------------------------------
    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._client = httpx.AsyncClient(
            base_url=self.upstream, timeout=httpx.Timeout(30.0), limits=httpx.Limits()
        )
        self._server = loop.run_until_complete(
            asyncio.start_server(self._serve, self.host, self.port)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            self._cut_all()
            loop.run_until_complete(self._client.aclose())
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    def _cut_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._offline:
            writer.transport.abort()
            return
        self._writers.add(writer)
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await self._read_request(conn, reader)
                if request is None or self._offline:
                    break
                status, headers, body = await self._forward(request)
                if status is None:  # a fault that cuts the connection
                    break
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
                writer.write(conn.send(h11.Data(data=body)))
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> _Request | None:
        request: _Request | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data and request is None:
                    return None
                continue
            if isinstance(event, h11.Request):
                request = _Request(
                    event.method.decode(),
                    event.target.decode(),
                    [(k.decode(), v.decode()) for k, v in event.headers],
                )
            elif isinstance(event, h11.Data) and request is not None:
                request.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request
            elif isinstance(event, h11.ConnectionClosed):
                return None

    def _draw(self, kind: str) -> bool:
        hit = self._rng.random() < float(getattr(self.plan, kind))
        if hit:
            self.counts[kind] += 1
        return hit

    async def _forward(self, request: _Request) -> tuple[int | None, list[tuple[str, str]], bytes]:
        self.counts["requests"] += 1
        if self._draw("drop_request"):
            return None, [], b""
        if self._draw("error"):
            body = b'{"title": "injected fault", "status": 503}'
            return 503, [("content-type", "application/problem+json")], body
        if self._draw("delay"):
            await asyncio.sleep(self._rng.uniform(0, self.plan.max_delay))
        duplicate = self._draw("duplicate")
        drop_response = self._draw("drop_response")
        sends = [self._upstream(request)] + ([self._upstream(request)] if duplicate else [])
        results = await asyncio.gather(*sends, return_exceptions=True)
        answered = [r for r in results if isinstance(r, httpx.Response)]
        if drop_response or not answered:
            return None, [], b""
        response = self._rng.choice(answered)
        headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP]
        return response.status_code, headers, response.content

    async def _upstream(self, request: _Request) -> httpx.Response:
        assert self._client is not None
        headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP_BY_HOP]
        return await self._client.request(
            request.method, request.target, headers=headers, content=request.body
        )
