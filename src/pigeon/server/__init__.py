"""The server: the idempotent intake, the ASGI app factory, middleware and auth.

    from pigeon.server import Intake, create_app

    intake = Intake(open_server_db("server.db"))
    intake.add_operation("POST", "/answers", accept_answer)   # handler gets ctx.tx
    app = create_app(intake)                                   # any ASGI server

Applications that cannot share the intake's transaction wrap themselves in
`IdempotencyMiddleware` instead, with the weaker guarantee its docstring states.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from pigeon.exceptions import ValidationError
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

# The reference application moved to ``pigeon.reference``; these names keep working for
# one release, with a DeprecationWarning, and are imported only when asked for.
_MOVED = {"create_notes_app": "pigeon.reference", "read_ledger": "pigeon.reference"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"pigeon.server.{name} moved to {_MOVED[name]}.{name}; the old name goes in the "
        "next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(_MOVED[name]), name)
