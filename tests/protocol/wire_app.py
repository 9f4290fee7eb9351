"""A tiny server that speaks the wire protocol, with faults on demand, for client tests.

Not the reference server (pigeon.server): just enough of DESIGN.md's intake to check the
client end to end over real HTTP: idempotency by (principal, key) with replay, key in
progress (409 + Retry-After), versions with ETag / If-Match (412), bearer auth, the batch
endpoint (stops at the first transient failure), a health endpoint, and a script of
faults per entity. Every first-time effect is appended to ``ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pigeon.core import wire


@dataclass
class Fault:
    status: int = 503
    retry_after: str | None = None
    delay: float = 0.0
    after_effect: bool = False  # apply the effect, then answer with the fault anyway
    problem: str | None = None


@dataclass
class WireState:
    ledger: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)
    stored: dict[tuple[str, str], tuple[int, dict[str, str], Any]] = field(default_factory=dict)
    running: set[tuple[str, str]] = field(default_factory=set)
    seen_keys: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    seen_if_match: list[str | None] = field(default_factory=list)
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    # The header lines as they came, repeats included (a dict keeps one of each name).
    seen_raw_headers: list[list[tuple[str, str]]] = field(default_factory=list)
    faults: dict[str, list[Fault]] = field(default_factory=lambda: defaultdict(list))
    tokens: set[str] | None = None  # None: no authentication
    delay: float = 0.0  # every request sleeps this long before answering
    # What the health route answers: 502 plays a gateway (or a server with no such
    # route) in front of working operation routes.
    health_status: int = 200
    # A rate limiter before the server: while set, every request (single or batch) is
    # answered 429 with this Retry-After, and nothing reaches the operations.
    rate_limited: str | None = None
    # Every operation that reached _apply, in order: (entity, key, status answered).
    received: list[tuple[str, str, int]] = field(default_factory=list)
    limited_requests: int = 0
    batch_requests: int = 0
    single_requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def effects(self, entity: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.ledger if entity is None or e["entity"] == entity]


Result = tuple[int, dict[str, str], Any]


def _problem(status: int, kind: str, detail: str, **extra: str) -> Result:
    return status, {"content-type": wire.PROBLEM_JSON, **extra}, {"type": kind, "detail": detail}


async def _apply(
    state: WireState,
    principal: str,
    key: str | None,
    method: str,
    entity: str,
    body: Any,
    if_match: str | None,
) -> tuple[Result, bool]:
    """Run one operation under its key. Returns (result, replayed)."""
    if not key:
        return _problem(400, wire.PROBLEM_KEY_MISSING, "Idempotency-Key required"), False
    with state.lock:
        state.seen_keys[key] += 1
        state.seen_if_match.append(if_match)
        if (principal, key) in state.stored:
            return state.stored[(principal, key)], True
        if (principal, key) in state.running:
            return _problem(
                409, wire.PROBLEM_KEY_IN_PROGRESS, "still running", **{"retry-after": "1"}
            ), False
        fault = state.faults[entity].pop(0) if state.faults.get(entity) else None
        state.running.add((principal, key))
    try:
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        if fault is not None and not fault.after_effect:
            headers = {"retry-after": fault.retry_after} if fault.retry_after else {}
            if fault.problem:
                return _problem(fault.status, fault.problem, "scripted", **headers), False
            return (fault.status, headers, {"error": "scripted fault"}), False
        with state.lock:
            current = state.versions.get(entity, 0)
            if if_match is not None and wire.unquote_etag(if_match) != str(current):
                result = _problem(
                    412, wire.PROBLEM_VERSION_CONFLICT, f"current version is {current}"
                )
                state.stored[(principal, key)] = result
                return result, False
            version = current + 1
            state.versions[entity] = version
            state.ledger.append(
                {"key": key, "entity": entity, "method": method, "body": body, "v": version}
            )
            result = (201 if method == "POST" else 200, {"etag": f'"{version}"'}, {"v": version})
            state.stored[(principal, key)] = result
        if fault is not None:  # after_effect: committed, but the client hears a failure
            return (fault.status, {}, {"error": "lost reply"}), False
        return result, False
    finally:
        with state.lock:
            state.running.discard((principal, key))


def _principal(state: WireState, request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    token = auth.removeprefix("Bearer ")
    if state.tokens is None:
        return token or "anonymous"
    return token.split(":")[0] if token in state.tokens else None


def create_wire_app(state: WireState) -> Starlette:
    def limited() -> Response | None:
        with state.lock:
            if state.rate_limited is None:
                return None
            state.limited_requests += 1
        headers = {"retry-after": state.rate_limited}
        return JSONResponse({"detail": "slow down"}, status_code=429, headers=headers)

    async def one(request: Request) -> Response:
        if (refused := limited()) is not None:
            return refused
        with state.lock:
            state.single_requests += 1
            state.seen_headers.append(dict(request.headers))
            state.seen_raw_headers.append(
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
            )
        raw = await request.body()
        body = await request.json() if raw else None
        if state.delay:  # after reading: a slow server still has the whole request
            await asyncio.sleep(state.delay)
        principal = _principal(state, request)
        if principal is None:
            return JSONResponse({"detail": "bad token"}, status_code=401)
        key = request.headers.get(wire.IDEMPOTENCY_KEY)
        entity = request.path_params["entity"]
        (status, headers, payload), replayed = await _apply(
            state,
            principal,
            key,
            request.method,
            entity,
            body,
            request.headers.get(wire.IF_MATCH),
        )
        with state.lock:
            state.received.append((entity, key or "", status))
        if replayed:
            headers = {**headers, wire.REPLAYED: "true"}
        return JSONResponse(payload, status_code=status, headers=headers)

    async def batch(request: Request) -> Response:
        if (refused := limited()) is not None:
            return refused
        with state.lock:
            state.batch_requests += 1
        operations = (await request.json())["operations"]
        if state.delay:
            await asyncio.sleep(state.delay)
        principal = _principal(state, request)
        if principal is None:
            return JSONResponse({"detail": "bad token"}, status_code=401)
        results = []
        for op in operations:
            entity = op["path"].rsplit("/", 1)[-1] if op.get("path") else op["entity"]
            (status, headers, payload), replayed = await _apply(
                state,
                principal,
                op["idempotency_key"],
                op["method"] or "POST",
                entity,
                op["body"],
                op.get("if_match"),
            )
            with state.lock:
                state.received.append((entity, op["idempotency_key"] or "", status))
            results.append(
                {
                    "id": op["id"],
                    "status": status,
                    "body": payload,
                    "replayed": replayed,
                    "headers": headers,
                }
            )
            if status >= 500 or status in (408, 425, 429) or status == 409:
                break
        return JSONResponse({"results": results})

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": state.health_status < 500}, status_code=state.health_status)

    return Starlette(
        routes=[
            Route(wire.HEALTH_PATH, health),
            Route(wire.BATCH_PATH, batch, methods=["POST"]),
            Route("/things/{entity}", one, methods=["POST", "PUT", "PATCH", "DELETE"]),
        ]
    )


def _tcp_socket() -> socket.socket:
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket's proto is IPPROTO_TCP, and plain socket.socket() has proto 0. Without
    # it every response waits out Nagle + delayed ACK (about 40 ms per request on loopback).
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)


class LiveServer:
    """uvicorn on a loopback socket, in a thread. `stop()` then `start()` simulates an outage."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.sock = _tcp_socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.sock.fileno() == -1:  # reopened after stop(): same port, new socket
            self.sock = _tcp_socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", self.port))
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [self.sock]})
        self._thread.daemon = True
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        with contextlib.suppress(OSError):
            self.sock.close()


@contextlib.contextmanager
def live_server(state: WireState) -> Iterator[LiveServer]:
    server = LiveServer(create_wire_app(state))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    """A loopback port with nothing listening (for 'server unreachable')."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
