"""A FastAPI application served by ``pigeon serve --app module:factory``: the command's
options (`pigeon.server.options.ServerOptions`) applied to its ``@pigeon.idempotent``
routes and to who calls.

    def serve(options: ServerOptions) -> FastAPI:     # pigeon serve --app mymodule:serve
        app = FastAPI()
        app.state.engine = create_engine(sqlalchemy_url(options))
        app.include_router(router)
        pigeon.install(app, batch=True, options=options)
        return app

``Pigeon.install(app, options=)`` gives that app's requests the options' idempotency
policy, body limit, keyring and test hooks (``--test-hooks``: the delay, fail,
Set-Cookie and crash headers of `pigeon.server.testhooks`); ``principal_from(options)``
is the dependency naming the caller by the options' authentication (``--auth``,
``--allow-anonymous``), for the app's ``Pigeon(principal=...)`` and its other routes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException, Request

from pigeon.exceptions import AuthorizationRequired, ConfigurationError
from pigeon.integrations.claims import Claims, refuse_unheeded_by_apps
from pigeon.server.auth import principal_of
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, checked_limits
from pigeon.server.options import ServerOptions, over_own
from pigeon.storage.crypto import Keyring

__all__ = ["Served", "principal_from", "served_by", "sqlalchemy_url"]


@dataclass(frozen=True, slots=True)
class Served:
    """How one application's idempotent requests are read and claimed."""

    claims: Claims
    keyring: Keyring | None
    max_body: int
    test_hooks: bool = False
    max_batch_body: int = DEFAULT_MAX_BATCH_BODY


def served_by(options: ServerOptions, own: Served) -> Served:
    """``options`` over an app's ``own`` settings (`over_own`: what the command was not
    given leaves the app's policy, body limits and keyring); the options that have no
    meaning where the application writes are refused (ConfigurationError naming them,
    `refuse_unheeded_by_apps`). The test hooks are always the command's."""
    intake, usual = options.intake, ServerOptions()
    refuse_unheeded_by_apps(options, "an @idempotent route")
    named = options.database.keyring() if options.database is not None else None
    keyring = named if named is not None else own.keyring  # --keys-file, or the environment's
    like = own.claims
    policy = over_own(intake.policy, usual.intake.policy, like.policy)
    claims = Claims(policy, like.now, like.claim_wait, like.after_commit)
    limits, usual_limits = options.limits, usual.limits
    max_body, max_batch_body = checked_limits(
        over_own(limits.max_body, usual_limits.max_body, own.max_body),
        over_own(limits.max_batch_body, usual_limits.max_batch_body, own.max_batch_body),
    )
    return Served(claims, keyring, max_body, intake.test_hooks, max_batch_body)


def principal_from(options: ServerOptions) -> Callable[[Request], str]:
    """A FastAPI dependency: the caller as the options' authenticator names it (the
    demo stand-in or JWT), ``anonymous`` without credentials where they are let in, and
    401 otherwise."""
    authenticate = options.auth.authenticator()
    anonymous = options.auth.anonymous

    def principal(request: Request) -> str:
        challenge = {"WWW-Authenticate": "Bearer"}
        try:
            found = principal_of(authenticate, request, allow_anonymous=anonymous)
        except AuthorizationRequired as exc:
            status = getattr(exc, "status", None) or 401
            raise HTTPException(status, str(exc), headers=challenge) from None
        if found is None:
            raise HTTPException(401, "an Authorization: Bearer token is required", challenge)
        return found

    return principal


def sqlalchemy_url(options: ServerOptions, *, asynchronous: bool = False) -> str:
    """The options' database (``--db``: a SQLite path or ``postgresql://...``) as
    SQLAlchemy names it, with psycopg, or aiosqlite for an ``AsyncSession`` on SQLite."""
    if options.database is None:
        raise ConfigurationError("these ServerOptions name no database", field="db")
    url = options.database.url
    if options.database.is_postgres:
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    driver = "sqlite+aiosqlite" if asynchronous else "sqlite"
    return f"{driver}:///{Path(url).resolve()}"
