"""``PathCheck``: every request's path passes the one identifier check
(`pigeon.server.identifiers.path_problem`) before routing, so no route, handler or store
of any app ``create_app`` builds (the intake's, the app's own, mounted ones) ever sees a
path parameter holding NUL, a control, bidi or other format character, invalid UTF-8 or
more than 255 characters: 400 ``bad-path`` on every backend.

Checked before the access decision too: the answer is the same for every path, served or
not, so it tells nobody which routes exist. (PostgreSQL refused a NUL in a read's id
with a 500, where SQLite answered 404: a per-route check had been left out of the reads.)
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from pigeon.server.identifiers import path_problem
from pigeon.server.messages import bad_request, render_result


class PathCheck:
    """ASGI middleware: refuse a request whose path fails ``path_problem``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            problem = path_problem(scope["path"], scope.get("raw_path"))
            if problem is not None:
                if scope["type"] == "websocket":
                    await WebSocketClose(code=1008)(scope, receive, send)  # policy violation
                else:
                    await render_result(bad_request("bad-path", problem))(scope, receive, send)
                return
        await self.app(scope, receive, send)
