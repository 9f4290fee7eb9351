"""A write's body read under pigeon's rules before the web framework reads it.

FastAPI reads a route's body whole before any dependency runs, and Django's ASGI handler
reads every body whole (into a temporary file) before any view runs: a limit checked in
the route came after an outsider's gigabytes had been taken in. Here the body is read
first, in ``pigeon serve``'s order (a bad key, a type that is not JSON, a Content-Length
over the limit refused from the head; the rest counted as it arrives), and the framework
then reads it from memory as if from the wire. ``body_first`` decides before the app
runs (Django: the path names the view); ``read_first`` when the app first asks for the
body, once its router has chosen the route (FastAPI, whose route then reads the
operation ``parse_request`` made of it: its own decoder never refuses first).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pigeon.server.messages import read_json_buffer
from pigeon.server.results import OpResult

__all__ = ["Limit", "Take", "body_first", "read_first"]

# The body limit of a request's route and what a refusal calls its body, or the refusal
# its head earns already; None: a route whose body is the framework's own business.
Limit = Callable[[Scope], "tuple[int, str] | OpResult | None"]
# The body of a request, read by the route's rules, or None where they do not apply; a
# refusal is raised, for the app to answer.
Take = Callable[[Request], Awaitable["bytes | None"]]


def body_first(app: ASGIApp, limit_of: Limit, refuse: Callable[[OpResult], ASGIApp]) -> ASGIApp:
    """``app``, the body of a request read first where ``limit_of`` names a limit; a
    refusal answered by the app ``refuse`` makes of it, and ``app`` never called."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        limit = limit_of(scope) if scope["type"] == "http" else None
        if limit is None:
            await app(scope, receive, send)
            return
        raw = limit if isinstance(limit, OpResult) else await _read(scope, receive, limit)
        if isinstance(raw, OpResult):
            await refuse(raw)(scope, receive, send)
            return
        await app(scope, _replayed(bytes(raw), receive), send)

    return guarded


async def _read(scope: Scope, receive: Receive, limit: tuple[int, str]) -> bytearray | OpResult:
    return await read_json_buffer(Request(scope, receive), *limit)


def read_first(scope: Scope, receive: Receive, take: Take) -> Receive:
    """``receive``, which, asked for the body the first time, has ``take`` read all of it
    (by then the app has chosen the route) and gives it whole; or, where ``take`` says
    None, the body as it comes."""
    decided: Receive | None = None

    async def first() -> Message:
        nonlocal decided
        if decided is None:
            body = await take(Request(scope, receive))
            decided = receive if body is None else _replayed(body, receive)
        return await decided()

    return first


def _replayed(body: bytes, receive: Receive) -> Receive:
    """``receive`` whose first message is the whole ``body``; then the connection's own
    (its disconnect)."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
