"""A fault-injecting HTTP proxy for the demo and the chaos tests.

It sits between a client and a pigeon server on loopback and, per request, may:

- ``drop_request``: close the connection without forwarding (the server never saw it);
- ``drop_response``: forward, let the server commit, then close the connection without
  answering (the client cannot know it happened: the case idempotency keys exist for);
- ``error``: answer 503 itself without forwarding;
- ``delay``: wait up to ``max_delay`` seconds first;
- ``duplicate``: forward the request twice, concurrently, and answer with one of the two.

Each kind fires on its configured share of requests (see ``FaultPlan``). It can also be
switched ``offline`` (every connection is closed at once: the tunnel). Requests are parsed
with h11 (the HTTP/1.1 state machine uvicorn uses) and forwarded with httpx; the proxy runs
its own event loop in a background thread so that synchronous tests and the demo can
drive it.

Apart from its faults it forwards what it got: the request target byte for byte (only
origin-form, ``/path?query``; an absolute URL is refused with 400, so the proxy never
carries a request to another host), repeated headers as they came, and the body as it
came off the wire (a gzip answer stays gzip, with its content-encoding).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

import h11
import httpx

from pigeon.exceptions import ConfigurationError

FAULT_KINDS = ("drop_request", "drop_response", "error", "delay", "duplicate")
# At most one of these per request: each decides what becomes of the request as a whole.
EXCLUSIVE_KINDS = ("drop_request", "error", "drop_response")
# Per-connection headers, remade for each hop (host: the upstream's). Content-length
# stays both ways, as the body is forwarded unchanged: httpx adds one only where a chunked
# request had none, and h11 keeps an answer's right for HEAD, 204 and 304.
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"upgrade", b"te"}
Headers = list[tuple[bytes, bytes]]
_SLACK = 1e-9  # float sums such as 0.1 + 0.2 + 0.7 land a hair above 1


@dataclass(frozen=True, slots=True)
class Faults:
    """What the network does to one request."""

    outcome: str | None = None  # one of EXCLUSIVE_KINDS, or None: forwarded and answered
    delay: float | None = None  # seconds waited before anything else, if delayed
    duplicate: bool = False  # forwarded twice (only ever a forwarded request)

    @property
    def kinds(self) -> list[str]:
        kinds = [] if self.outcome is None else [self.outcome]
        if self.delay is not None:
            kinds.append("delay")
        if self.duplicate:
            kinds.append("duplicate")
        return kinds


@dataclass(frozen=True)
class FaultPlan:
    """The share of requests each fault kind hits: ``error=0.1`` means 503 on 10% of them.

    Every kind holds its own rate per request. ``drop_request``, ``error`` and
    ``drop_response`` exclude each other (a request is cut, refused or answered into the
    void, never two of these), so they are picked in one draw and their rates must not sum
    above 1. ``delay`` is drawn on its own for every request. ``duplicate`` can only hit a
    forwarded request (not dropped before the server, not refused with 503), so it is drawn
    among those with the rate raised to keep its share of all requests; it must not exceed
    the forwarded share, ``1 - drop_request - error``.
    """

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
        exclusive = math.fsum(getattr(self, kind) for kind in EXCLUSIVE_KINDS)
        if exclusive > 1.0 + _SLACK:
            raise ConfigurationError(
                f"drop_request + error + drop_response = {exclusive:g} is above 1: at most "
                "one of them happens to a request, so their rates cannot sum above 1"
            )
        if self.duplicate > self._forwarded + _SLACK:
            raise ConfigurationError(
                f"duplicate={self.duplicate:g} is above the share of requests forwarded at "
                f"all (1 - drop_request - error = {self._forwarded:g}): only a forwarded "
                "request can be duplicated"
            )
        if not self.max_delay >= 0:
            raise ConfigurationError(f"max_delay={self.max_delay} must not be negative")

    @property
    def _forwarded(self) -> float:
        return max(1.0 - self.drop_request - self.error, 0.0)

    @classmethod
    def uniform(cls, rate: float, *, max_delay: float = 0.05, seed: int | None = None) -> FaultPlan:
        """Every kind at ``rate``; at most 1/3, the three exclusive kinds share requests."""
        return cls(rate, rate, rate, rate, rate, max_delay=max_delay, seed=seed)

    def draw(self, rng: random.Random) -> Faults:
        """The faults of one request. Pure given ``rng``."""
        delay = rng.uniform(0, self.max_delay) if rng.random() < self.delay else None
        roll, edge, outcome = rng.random(), 0.0, None
        for kind in EXCLUSIVE_KINDS:
            edge += getattr(self, kind)
            if roll < edge:
                outcome = kind
                break
        duplicate = False
        if outcome not in ("drop_request", "error") and self.duplicate > 0:
            # P(duplicate | forwarded) = duplicate / forwarded, so that its share of all
            # requests is the plan's; multiplied out, a zero forwarded share cannot divide.
            duplicate = rng.random() * self._forwarded < self.duplicate
        return Faults(outcome, delay, duplicate)


@dataclass
class _Request:
    method: bytes
    target: bytes
    headers: Headers
    body: bytearray = field(default_factory=bytearray)  # grown in place: linear in the chunks


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    headers: Headers
    body: bytes
    reason: bytes = b""


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
        # Which of two duplicated answers to return: apart from the plan's draws, so that a
        # seeded proxy fed requests one at a time draws exactly what the plan alone would.
        self._pick = random.Random(self.plan.seed)
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
        # No base_url: httpx merges a target such as //other/x into the URL's authority.
        # Requests are built by hand (see _upstream), so none of the client's default
        # headers (accept-encoding, user-agent) are added to what the client sent.
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=httpx.Limits())
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
                answer = await self._forward(request)
                if answer is None:  # a fault that cuts the connection
                    break
                head = h11.Response(
                    status_code=answer.status, headers=answer.headers, reason=answer.reason
                )
                writer.write(conn.send(head))
                writer.write(conn.send(h11.Data(data=answer.body)))
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
                # Bytes as they came (h11 has checked them): nothing to decode or re-encode.
                request = _Request(event.method, event.target, list(event.headers.raw_items()))
            elif isinstance(event, h11.Data) and request is not None:
                request.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _forward(self, request: _Request) -> _Answer | None:
        """The answer to send back, or None to cut the connection."""
        if not request.target.startswith(b"/"):
            # An absolute URL (or authority or * form) would name another server: this is a
            # reverse proxy for one upstream, not an open forward proxy.
            body = b'{"title": "request target must be a path (origin-form)", "status": 400}'
            return _Answer(400, [(b"content-type", b"application/problem+json")], body)
        self.counts["requests"] += 1
        faults = self.plan.draw(self._rng)
        self.counts.update(faults.kinds)
        if faults.delay is not None:
            await asyncio.sleep(faults.delay)
        if faults.outcome == "drop_request":
            return None
        if faults.outcome == "error":
            body = b'{"title": "injected fault", "status": 503}'
            return _Answer(503, [(b"content-type", b"application/problem+json")], body)
        sends = [self._upstream(request)] + ([self._upstream(request)] if faults.duplicate else [])
        results = await asyncio.gather(*sends, return_exceptions=True)
        answered = [r for r in results if isinstance(r, _Answer)]
        if faults.outcome == "drop_response" or not answered:
            return None
        return self._pick.choice(answered)

    async def _upstream(self, request: _Request) -> _Answer:
        assert self._client is not None
        upstream = httpx.URL(self.upstream)
        headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP_BY_HOP]
        outgoing = httpx.Request(
            request.method.decode("ascii"),  # a token: h11 let through nothing else
            upstream,
            headers=headers,
            content=bytes(request.body),
            # The request line's target, byte for byte: an httpx URL would normalise it
            # (/a/../b becomes /b). An upstream URL's own path is kept in front, as before.
            extensions={"target": upstream.raw_path.rstrip(b"/") + request.target},
        )
        response = await self._client.send(outgoing, stream=True)
        try:
            # Raw: the body as the upstream encoded it, so content-encoding stays true.
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
        reason = response.extensions.get("reason_phrase", b"")
        return _Answer(response.status_code, headers, body, reason)
