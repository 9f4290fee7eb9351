"""FastAPI + SQLAlchemy 2: exactly once inside the application's own session.

    from pigeon.integrations.fastapi import Pigeon, defer

    pigeon = Pigeon(principal=current_user)

    @app.post("/orders", status_code=201)
    @pigeon.idempotent
    def create_order(order: OrderIn, session: Session = Depends(get_session)) -> OrderOut:
        ...                                   # ORM writes, defer(session, ...) for jobs
    pigeon.install(app)                   # the refusals answered, and in /openapi.json

A refusal (no key, a body no strict decoder takes) is raised as ``Refused``, an
``HTTPException`` with the intake's answer in ``result``: an app with its own error
handlers registers one for it (after ``install``) to answer or count refusals its way.

The key's claim, the handler's ORM writes, the jobs it defers and the stored response
commit in one transaction of the session (`pigeon.integrations.fastapi.routes`); pigeon's
tables come from the application's migrations (`pigeon.integrations.migrations`, or
``pigeon migrate --db URL``). Served by ``pigeon serve --app module:factory``, the app
takes the command's options (`pigeon.integrations.fastapi.served`).
"""

from __future__ import annotations

from pigeon.integrations.fastapi import _extra  # noqa: F401  (first: one line naming the extra)
from pigeon.integrations.fastapi.routes import Pigeon, Refused
from pigeon.integrations.fastapi.served import principal_from, sqlalchemy_url
from pigeon.integrations.fastapi.sessions import defer, defer_async, session_tx

__all__ = [
    "Pigeon",
    "Refused",
    "defer",
    "defer_async",
    "principal_from",
    "session_tx",
    "sqlalchemy_url",
]
