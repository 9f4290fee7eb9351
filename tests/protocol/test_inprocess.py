"""InProcessTransport: the same client code against an ASGI app or a handler, no socket."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pigeon.core import wire
from pigeon.exceptions import ConfigurationError
from pigeon.protocol.inprocess import InProcessTransport
from tests.protocol.test_http import op
from tests.protocol.wire_app import Fault, WireState, create_wire_app


def test_asgi_app_single_and_batch_with_replay() -> None:
    state = WireState()
    state.faults["a"].append(Fault(502, after_effect=True))
    first = op("a")
    with InProcessTransport(create_wire_app(state), lifespan=False) as t:
        assert t.probe()
        assert t.send([first]).replies[0][1].status == 502
        again = t.send([first]).replies[0][1]
    assert again.status == 201 and again.replayed
    with InProcessTransport(create_wire_app(state), batch=True, lifespan=False) as t:
        replies = [r for _, r in t.send([first, op("b")]).replies]
    assert [(r.status, r.replayed) for r in replies] == [(201, True), (201, False)]
    assert [e["entity"] for e in state.effects()] == ["a", "b"]


def test_lifespan_runs_at_open_and_close_and_app_errors_are_500() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    async def boom(request: Request) -> JSONResponse:
        raise RuntimeError("handler bug")

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"key": request.headers[wire.IDEMPOTENCY_KEY]})

    app = Starlette(
        routes=[
            Route("/things/boom", boom, methods=["POST"]),
            Route("/things/{x}", echo, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    one = op("x")
    with InProcessTransport(app) as t:
        assert events == ["startup"]
        replies = [r for _, r in t.send([one, op("boom")]).replies]
    assert events == ["startup", "shutdown"]
    assert replies[0].status == 200 and replies[0].body == {"key": one.idempotency_key}
    assert replies[1].status == 500


def test_handler_mode_and_bad_arguments() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers[wire.IDEMPOTENCY_KEY])
        return httpx.Response(503, headers={"Retry-After": "3"})

    one = op("a")
    with InProcessTransport(handler=handler) as t:
        reply = t.send([one]).replies[0][1]
    assert reply.status == 503 and reply.headers["retry-after"] == "3"
    assert seen == [one.idempotency_key]
    with pytest.raises(ConfigurationError, match="exactly one"):
        InProcessTransport()


def test_an_app_slower_than_the_timeout_is_a_read_timeout() -> None:
    # Embedded, a hung app must not hang the engine's cycle (and stop() with it): the
    # timeout option was dropped (the client is made here) and the loop bridge waited
    # for the app without any limit, httpx's default included.
    state = WireState()
    state.delay = 2.0
    with InProcessTransport(create_wire_app(state), lifespan=False, timeout=0.3) as t:
        started = time.monotonic()
        reply = t.send([op("a")]).replies[0][1]
        assert isinstance(reply.error, httpx.ReadTimeout)
        assert time.monotonic() - started < 1.5
        state.delay = 0.0
        assert t.send([op("b")]).replies[0][1].status == 201  # the bridge still works


def test_closing_cancels_a_request_still_running_and_lets_it_unwind() -> None:
    """A request that outlived its timeout is cancelled when the transport closes, and
    its cleanup runs (it used to be destroyed pending with the loop)."""
    events: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        events.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        finally:
            events.append("cleaned up")

    with InProcessTransport(app, lifespan=False, timeout=0.2) as t:
        assert isinstance(t.send([op("a")]).replies[0][1].error, httpx.ReadTimeout)
        assert events == ["started"]
    assert events == ["started", "cancelled", "cleaned up"]
