"""Connection timeouts of ``pigeon serve``: a connection that sends nothing, half a
request head or half a body is closed, never held open for ever.

uvicorn closes a keep-alive connection idle after a response (``timeout_keep_alive``)
but has no deadline for a new connection's first request, for a request head, or for
a body: a client sending one byte a minute kept its connection (and the socket, and a
task waiting on the body) as long as it liked. ``TimedH11Protocol`` is uvicorn's h11
protocol with three deadlines, one running at any time, by what the connection waits
for:

- ``idle`` (default 10 s): from the connection's start, or the end of its last
  response, to the first byte of a request. Closed silently, as an idle keep-alive is.
- ``headers`` (default 10 s): from that first byte to the end of the request head
  (whose size h11 already bounds, 16 KiB). Answered ``408`` and closed.
- ``body`` (default 60 s): from the end of the head to the end of the body, whatever
  the app does meanwhile (a body the app never reads, after a 413, counts too). The
  connection is closed; an app still reading the body sees the client disconnect
  (`pigeon.server.limits.read_body` then logs one line, and nothing runs). A client on
  a link slower than the largest body per minute sends smaller batches.

While the app works on a request whose body is whole, no deadline runs: how long a
handler may take is the app's own business. The values (``pigeon serve --timeout-idle /
--timeout-headers / --timeout-body``, ``ConnectionTimeouts``) travel in ``TimedConfig``,
the uvicorn configuration that each worker process receives whole.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from pigeon.server.options import ConnectionTimeouts

Phase = Literal["idle", "headers", "body", "busy"]
_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 25\r\nconnection: close\r\n\r\nthe request took too long"
)


class TimedConfig(uvicorn.Config):
    """uvicorn's configuration serving with ``TimedH11Protocol`` and these ``timeouts``
    (its keep-alive timeout is the idle one). Picklable whole: uvicorn hands it to each
    worker process it starts, the timeouts with it."""

    def __init__(self, app: Any, *, timeouts: ConnectionTimeouts, **options: Any) -> None:
        keep_alive = max(1, round(timeouts.idle))
        super().__init__(app, http=TimedH11Protocol, timeout_keep_alive=keep_alive, **options)
        self.connection_timeouts = timeouts


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the idle, header and body deadlines above, those of
    its ``TimedConfig`` (the defaults under another configuration)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        config = self.config
        self.timeouts = (
            config.connection_timeouts if isinstance(config, TimedConfig) else ConnectionTimeouts()
        )
        self._phase: Phase = "busy"
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Start the deadline of what the connection now waits for, when that changed
        (a deadline runs on across the calls of one phase: a byte at a time does not
        restart it)."""
        state = self.conn.their_state
        waiting: Phase
        if state is h11.IDLE:
            # Bytes of a head not yet whole sit in h11's buffer: that head is now due.
            waiting = "headers" if self.conn.trailing_data[0] else "idle"
        elif state is h11.SEND_BODY:
            waiting = "body"
        else:  # the request is whole (DONE), or the connection is ending
            waiting = "busy"
        if waiting != self._phase:
            self._enter(waiting)

    def _enter(self, phase: Phase) -> None:
        self._cancel()
        self._phase = phase
        if phase == "busy" or self.transport.is_closing():
            return
        seconds = getattr(self.timeouts, phase)
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, phase: Phase) -> None:
        self._deadline = None
        if self.transport.is_closing() or phase != self._phase:
            return
        if phase == "headers":
            self.transport.write(_REQUEST_TIMEOUT)
        self.logger.info("closing a connection: its request %s did not arrive in time", phase)
        self.transport.close()
