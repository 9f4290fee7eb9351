"""``@idempotent_action``: ``@idempotent`` for a Django REST framework view's handler.

    class Orders(APIView):
        @idempotent_action
        def post(self, request):
            serializer = OrderIn(data=request.data); serializer.is_valid(raise_exception=True)
            order = serializer.save()
            defer(queue="payments", task="charge", payload={"order": order.pk})
            return Response(OrderOut(order).data, status=201)

The key is claimed after DRF's authentication, permissions and throttles ran (their
refusals store nothing) and with DRF's ``request.user`` as the principal. The handler's
``Response`` is rendered inside the transaction, so the stored answer is the bytes sent;
an ``APIException`` (a serializer's ``ValidationError``, ``NotFound``) is DRF's own
answer to it, stored or not by its status as any other. Keep ``ATOMIC_REQUESTS`` off for
such views (pigeon commits their transaction). DRF is imported by nothing else here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS
from django.http.response import HttpResponseBase

from pigeon.core.wire import WRITE_METHODS
from pigeon.integrations.django.answers import response_of
from pigeon.integrations.django.views import ENTRY, BatchEntry, GuardedView

F = TypeVar("F", bound=Callable[..., Any])


def idempotent_action(method: F | None = None, *, using: str = DEFAULT_DB_ALIAS) -> Any:
    """Decorate an ``APIView`` (or viewset) handler method; ``using``: its database."""

    def decorate(fn: F) -> F:
        guarded = GuardedView(fn, using)

        @functools.wraps(fn)
        def wrapper(view: Any, request: Any, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method.upper() not in WRITE_METHODS:
                return fn(view, request, *args, **kwargs)

            def call() -> HttpResponseBase:
                return _rendered(view, request, fn, args, kwargs)

            entry: BatchEntry | None = getattr(request, ENTRY, None)
            if entry is None:
                result, own = guarded.answer(request, call)
            else:  # a batch's entry, parsed with its batch
                result, own = entry.answer(request, using, call)
            return own if own is not None else response_of(result)

        wrapper.pigeon_view = guarded  # type: ignore[attr-defined]  # found by the batch
        return wrapper  # type: ignore[return-value]

    return decorate if method is None else decorate(method)


def _rendered(
    view: Any, request: Any, fn: Callable[..., Any], args: Any, kwargs: Any
) -> HttpResponseBase:
    """The handler's answer as DRF sends it: an ``APIException`` handled by the view's
    exception handler, the response finalized and rendered (others raise on)."""
    try:
        response = fn(view, request, *args, **kwargs)
    except Exception as exc:
        response = view.handle_exception(exc)  # raises again what is no APIException
    response = view.finalize_response(request, response, *args, **kwargs)
    render = getattr(response, "render", None)
    if render is not None:
        render()
    return response
