"""`InProcessTransport`: the real HTTP transport, minus the socket, for tests and embedding.

It is `HttpTransport` with the httpx client pointed at an ASGI application running in the
same process, or at a plain function from request to response. Everything above the
socket is the code that runs in production: headers, batch encoding, reply parsing.

The ASGI app runs on its own event loop in a daemon thread (httpx.ASGITransport is
async-only and transports are synchronous, see `pigeon.protocol.transport`). The app's
lifespan startup runs when the transport is made and its shutdown when it is closed;
lifespan *state* is not passed to requests, so apps should keep what they need on
``app.state``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx

from pigeon.exceptions import ConfigurationError
from pigeon.protocol.http import DEFAULT_TIMEOUT, HttpTransport

IN_PROCESS_URL = "http://pigeon.invalid"
Handler = Callable[[httpx.Request], httpx.Response]
T = TypeVar("T")


class _LoopThreadASGI(httpx.BaseTransport):
    """A synchronous httpx transport that runs an ASGI app on a private event loop."""

    def __init__(self, app: Any, *, lifespan: bool) -> None:
        self._app = app
        # App exceptions become 500s, as a real server would answer them.
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._lifespan_in: asyncio.Queue[dict[str, Any]] | None = None
        self._lifespan_task: asyncio.Future[None] | None = None
        if lifespan:
            self._call(self._startup())

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # Rebuild the request around bytes: its sync stream cannot be read from the loop.
        body = request.read()
        inner = httpx.Request(request.method, request.url, headers=request.headers, content=body)
        # httpx leaves timeouts to the transport, and ASGITransport keeps none: without
        # this, an app that hangs held the engine's cycle (and stop()) forever. The whole
        # body is handed over at once, so waiting for the answer is the read.
        read = request.extensions.get("timeout", {}).get("read")
        try:
            return self._call(self._round_trip(inner), read)
        except concurrent.futures.TimeoutError:
            # Not cancelled: like a real server after the client gave up, the app goes on
            # (a commit it makes is replayed to the same key next time).
            raise httpx.ReadTimeout(
                f"the app did not answer within {read} s", request=request
            ) from None

    async def _round_trip(self, request: httpx.Request) -> httpx.Response:
        response = await self._asgi.handle_async_request(request)
        content = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=content)

    async def _startup(self) -> None:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        started: asyncio.Future[str] = self._loop.create_future()
        self._lifespan_in = inbox

        async def send(message: dict[str, Any]) -> None:
            if not started.done() and message["type"].startswith("lifespan.startup."):
                started.set_result(message["type"])

        async def run() -> None:
            scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
            try:
                await self._app(scope, inbox.get, send)
            finally:
                if not started.done():
                    started.set_result("lifespan.unsupported")

        self._lifespan_task = asyncio.ensure_future(run())
        await inbox.put({"type": "lifespan.startup"})
        if await started == "lifespan.startup.failed":
            raise ConfigurationError("the ASGI app failed its lifespan startup")

    async def _shutdown(self) -> None:
        if self._lifespan_in is None or self._lifespan_task is None:
            return
        if not self._lifespan_task.done():
            await self._lifespan_in.put({"type": "lifespan.shutdown"})
            await asyncio.wait_for(self._lifespan_task, timeout=10)

    async def _cancel_rest(self) -> None:
        """Cancel what is still running on the loop (a request that outlived its timeout)
        and wait for it to unwind, as a server shutting down would: closing the loop over
        pending tasks destroyed them without running their cleanup."""
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._shutdown())
            self._call(self._cancel_rest(), 10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


class InProcessTransport(HttpTransport):
    """Speak to ``app`` (an ASGI application) or ``handler`` in this process.

    Other keyword options are those of `HttpTransport` (``batch``, ``token``, ...).
    ``lifespan=False`` skips the app's startup/shutdown. Close the transport when done.
    """

    def __init__(
        self,
        app: Any = None,
        *,
        handler: Handler | None = None,
        lifespan: bool = True,
        base_url: str = IN_PROCESS_URL,
        **options: Any,
    ) -> None:
        transport: httpx.BaseTransport
        if app is not None and handler is None:
            transport = _LoopThreadASGI(app, lifespan=lifespan)
        elif handler is not None and app is None:
            transport = httpx.MockTransport(handler)
        else:
            raise ConfigurationError("InProcessTransport needs exactly one of app= or handler=")
        # The timeout is the client's (HttpTransport ignores its own with a client given).
        timeout = options.pop("timeout", DEFAULT_TIMEOUT)
        client = httpx.Client(base_url=base_url, transport=transport, timeout=timeout)
        super().__init__(client=client, **options)
        self._owns_client = True  # closing the client closes the app's loop too
