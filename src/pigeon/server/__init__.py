"""The server: the idempotent intake, the ASGI app factory, middleware and auth.

    from pigeon.server import Intake, create_app

    intake = Intake(open_server_db("server.db"))
    intake.add_operation("POST", "/answers", accept_answer)   # handler gets ctx.tx
    app = create_app(intake)                                   # any ASGI server

``ServerOptions`` (`pigeon.server.options`) is every setting of a server in one frozen
value: ``pigeon serve --app module:factory`` hands it to ``factory(options)``, which
makes ``Intake(options.open_db(), options.intake)`` and ``create_app(intake, options)``.

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
from pigeon.server.options import IntakeOptions, ServerOptions

__all__ = [
    "BearerAuth",
    "IdempotencyMiddleware",
    "IdempotencyPolicy",
    "IdempotencyStore",
    "Intake",
    "IntakeContext",
    "IntakeOptions",
    "ServerOptions",
    "ValidationError",
    "create_app",
]
