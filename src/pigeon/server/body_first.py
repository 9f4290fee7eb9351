"""A write's body read under pigeon's rules before the web framework reads it.

FastAPI reads a route's body whole before any dependency runs, and Django's ASGI handler
reads every body whole (into a temporary file) before any view runs: a limit checked in
the route came after an outsider's gigabytes had been taken in. Here the body is read
first (`read_json_buffer`: a type that is not JSON or a Content-Length over the limit
refused from the head, the rest counted as it arrives), and the framework then reads it
from memory as if from the wire. ``body_first`` decides before the app runs (Django: the
path names the view); ``read_first`` when the app first asks for the body, once its
router has chosen the route (FastAPI).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pigeon.server.messages import read_json_buffer
from pigeon.server.results import OpResult

__all__ = ["Limit", "body_first", "read_first"]

# The body limit of a request's route and what a refusal calls its body; None: a route
# whose body is the framework's own business.
Limit = Callable[[Scope], "tuple[int, str] | None"]


def body_first(app: ASGIApp, limit_of: Limit, refuse: Callable[[OpResult], ASGIApp]) -> ASGIApp:
    """``app``, the body of a request read first where ``limit_of`` names a limit; a
    refusal answered by the app ``refuse`` makes of it, and ``app`` never called."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        limit = limit_of(scope) if scope["type"] == "http" else None
        if limit is None:
            await app(scope, receive, send)
            return
        raw = await read_json_buffer(Request(scope, receive), *limit)
        if isinstance(raw, OpResult):
            await refuse(raw)(scope, receive, send)
            return
        await app(scope, _replayed(bytes(raw), receive), send)

    return guarded


def read_first(
    scope: Scope, receive: Receive, limit_of: Limit, refused: Callable[[OpResult], Exception]
) -> Receive:
    """``receive``, which, asked for the body the first time, reads all of it where
    ``limit_of`` names a limit then, and gives it whole; a refusal is raised as
    ``refused`` makes it, for the app to answer."""
    decided: Receive | None = None

    async def first() -> Message:
        nonlocal decided
        if decided is None:
            limit = limit_of(scope)
            if limit is None:
                decided = receive
            else:
                raw = await read_json_buffer(Request(scope, receive), *limit)
                if isinstance(raw, OpResult):
                    raise refused(raw)
                decided = _replayed(bytes(raw), receive)
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
