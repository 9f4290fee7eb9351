"""What the routes share: the ``Pigeon`` of the app, who calls, and the session."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from sqlalchemy.orm import Session

from pigeon.integrations.fastapi import Pigeon

ANONYMOUS = "anonymous"


def current_user(request: Request) -> str:
    """The caller. Under ``pigeon serve --app``, as the command's ``--auth`` names it;
    run on its own, the bearer token itself, for the example: put your own
    authentication here (keys, notes and orders are scoped by what it returns)."""
    served = getattr(request.app.state, "principal", None)
    if served is not None:
        return str(served(request))
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    return token if scheme.lower() == "bearer" and token else ANONYMOUS


def session(request: Request) -> Iterator[Session]:
    """One session per request; ``@pigeon.idempotent`` commits it (or rolls it back)."""
    with Session(request.app.state.engine) as s:
        yield s


pigeon = Pigeon(principal=current_user)
