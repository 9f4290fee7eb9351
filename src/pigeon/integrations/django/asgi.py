"""A Django project's ASGI application with the bodies of pigeon's routes read first.

    application = read_bodies_first(get_asgi_application())      # the project's asgi.py

Django's ASGI handler reads every request body whole, into a temporary file, before any
view runs: the limits ``@idempotent`` and ``batch_view`` check came after an outsider's
gigabytes were on disk. Wrapped, a write to one of them is read here first, as ``pigeon
serve`` reads it (`pigeon.server.body_first`): a bad key, a type that is not JSON or a
Content-Length over the limit is refused from the head, the rest counted as it arrives.
The limits are the views' own (``settings.PIGEON["MAX_BODY"]`` and ``["MAX_BATCH_BODY"]``), each
lowered to Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``. Any other request goes through
untouched. Under WSGI nothing is needed: Django reads a body there only when the view
asks for it.
"""

from __future__ import annotations

from django.urls import Resolver404, resolve
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Scope

from pigeon.core.wire import WRITE_METHODS
from pigeon.integrations.django.answers import WHAT as ONE
from pigeon.integrations.django.answers import capped, test_hooks_for
from pigeon.integrations.django.batch import WHAT as BATCH
from pigeon.integrations.django.batch import batch_view, guarded
from pigeon.integrations.django.conf import configured
from pigeon.server.body_first import body_first
from pigeon.server.messages import head_refusal, render_result
from pigeon.server.results import OpResult

__all__ = ["read_bodies_first"]


def read_bodies_first(application: ASGIApp) -> ASGIApp:
    """``application`` with the bodies of pigeon's routes read under their limits first."""
    return body_first(application, _limit, render_result)


def _limit(scope: Scope) -> tuple[int, str] | OpResult | None:
    """The limit of the pigeon route ``scope`` writes to (None: not one of pigeon's), or
    the refusal of one operation's key, which comes before its body's (``operation_of``)."""
    method = scope["method"]
    if method not in WRITE_METHODS:
        return None
    path, root = scope["path"], scope.get("root_path", "")
    try:
        view = resolve(path[len(root) :] if root and path.startswith(root) else path).func
    except Resolver404:
        return None
    if view is batch_view:
        limit, what = configured().max_batch_body, BATCH
    elif guarded(view, method):
        conf = configured()
        client = scope.get("client") or ("", 0)
        refused = head_refusal(Headers(scope=scope), test_hooks_for(conf, client[0]))
        if refused is not None:
            return refused
        limit, what = conf.max_body, ONE
    else:
        return None
    return capped(limit), what
