"""The server: the idempotent intake, the ASGI app factory, middleware and auth.

    from pigeon.server import Intake, create_app

    intake = Intake(open_server_db("server.db"))
    intake.add_operation("POST", "/answers", accept_answer)   # handler gets ctx.tx
    app = create_app(intake)                                   # any ASGI server

Applications that cannot share the intake's transaction wrap themselves in
`IdempotencyMiddleware` instead, with the weaker guarantee its docstring states.
"""

from __future__ import annotations

from pigeon.exceptions import ValidationError
from pigeon.server import _extra  # noqa: F401  (first: one line naming the extra)
from pigeon.server.app import create_app
from pigeon.server.auth import BearerAuth
from pigeon.server.idempotency import IdempotencyPolicy, IdempotencyStore
from pigeon.server.intake import Intake, IntakeContext
from pigeon.server.middleware import IdempotencyMiddleware

__all__ = [
    "BearerAuth",
    "IdempotencyMiddleware",
    "IdempotencyPolicy",
    "IdempotencyStore",
    "Intake",
    "IntakeContext",
    "ValidationError",
    "create_app",
]
