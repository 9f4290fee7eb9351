"""The app ``pigeon serve --app module:attr`` serves: a factory, called with the server's
`ServerOptions` in every serving process and returning an ASGI app, or an ASGI app itself.

A factory (``def make(options: ServerOptions) -> ASGI app``, for example
``create_app(Intake(options.open_db(), options.intake), options)``) gets every option of
the command: the database, the intake's policy, the body limits, who may call what, the
test hooks. An ASGI app object was built before any option existed: it takes none of
them, and ``pigeon serve`` refuses the options it would leave unheeded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

from starlette.types import ASGIApp

from pigeon.core.imports import import_ref
from pigeon.exceptions import ConfigurationError
from pigeon.server.options import ServerOptions

AppFactory = Callable[[ServerOptions], ASGIApp]


def is_asgi_app(target: object) -> bool:
    """An ASGI application: a coroutine function (``async def app(scope, receive,
    send)``) or an object whose ``__call__`` is one (Starlette, FastAPI, middleware)."""
    if inspect.isclass(target):
        return False  # calling a class makes an instance: a factory, if anything
    if inspect.iscoroutinefunction(target):  # a function, or a partial of one
        return True
    if inspect.isroutine(target) or not callable(target):
        return False
    return inspect.iscoroutinefunction(type(target).__call__)  # what calling it runs


def load_served(ref: str) -> AppFactory | ASGIApp:
    """What ``ref`` names: an ASGI app, or a factory taking the options (checked to
    take one argument); a ConfigurationError saying what is wrong otherwise."""
    target: Any = import_ref(ref, "app")
    if is_asgi_app(target):
        return target  # type: ignore[no-any-return]
    if not callable(target):
        raise ConfigurationError(
            f"{ref} is a {type(target).__name__}: neither an ASGI app nor a factory taking "
            "the ServerOptions",
            field="app",
        )
    try:
        inspect.signature(target).bind(None)
    except TypeError:
        raise ConfigurationError(
            f"{ref} cannot be called with the ServerOptions alone: a factory takes one "
            "argument, the options, and returns an ASGI app",
            field="app",
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): calling it will tell
    return target  # type: ignore[no-any-return]


def build_served(ref: str, options: ServerOptions) -> ASGIApp:
    """The ASGI app to serve: ``ref``'s factory called with ``options``, or ``ref``'s app.
    A factory that raises, or returns no ASGI app, is a ConfigurationError naming it."""
    found = load_served(ref)
    if is_asgi_app(found):
        return cast(ASGIApp, found)
    factory = cast(AppFactory, found)
    try:
        app = factory(options)
    except ConfigurationError:
        raise
    except Exception as exc:  # the application's own code
        raise ConfigurationError(
            f"{ref} raised {type(exc).__name__}: {exc}".splitlines()[0], field="app"
        ) from exc
    if not is_asgi_app(app):
        raise ConfigurationError(
            f"{ref} returned a {type(app).__name__}, not an ASGI app", field="app"
        )
    return app
