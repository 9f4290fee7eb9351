"""``@idempotent``: a Django view whose effect happens once per Idempotency-Key.

    @csrf_exempt
    @idempotent
    def create_order(request):
        order = Order.objects.create(item=json.loads(request.body)["item"])
        defer(queue="payments", task="charge", payload={"order": order.pk})
        return JsonResponse({"id": order.pk}, status=201)

A write (POST, PUT, PATCH, DELETE) is read as the intake reads it (the key, strict JSON,
the headers' rules: a refusal there stores nothing), then `pigeon.integrations.claims`
claims the key inside ``transaction.atomic(using=...)`` on the view's database, runs the
view, stores its response and commits: the claim, the ORM writes, the deferred jobs and
the stored answer are one commit. A replay answers the stored response without calling
the view. Other methods (GET, HEAD, OPTIONS) call the view as it is.

Outcomes follow the intake: a 2xx and a deterministic 4xx are stored (a 4xx after the
view's writes are rolled back); a 5xx, an exception, 401/403/408/425/429 roll back
everything, the claim too, so the key is free for the retry. An exception is answered
500 problem+json with an error id its log line carries; ``Http404``, ``PermissionDenied``
and ``BadRequest`` are the 404, 403 and 400 they mean.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, transaction
from django.http.response import HttpResponseBase

from pigeon.core.wire import WRITE_METHODS
from pigeon.integrations.django.answers import (
    operation_of,
    principal_for,
    refusal_of,
    response_of,
    view_result,
)
from pigeon.integrations.django.conf import Configured, configured
from pigeon.integrations.django.transactions import AtomicWork
from pigeon.server import testhooks
from pigeon.server.identifiers import loggable
from pigeon.server.operations import OperationRequest
from pigeon.server.results import OpResult, server_error

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("pigeon.integrations.django")


@dataclass(frozen=True)
class GuardedView:
    """What ``@idempotent`` wraps: the view and its database alias (the batch view finds
    it on the wrapper, as ``pigeon_view``)."""

    view: Callable[..., HttpResponseBase]
    using: str

    def answer(
        self, request: Any, call: Callable[[], HttpResponseBase]
    ) -> tuple[OpResult, HttpResponseBase | None]:
        """The answer to the write ``request``, and the view's own response when it is
        that answer (sent as it is: its cookies too)."""
        conf = configured()
        principal = principal_for(request, conf)
        if isinstance(principal, OpResult):
            return principal, None
        op = operation_of(request, conf)
        if isinstance(op, OpResult):
            return op, None
        return run(conf, self.using, principal, op, call)


def run(
    conf: Configured,
    using: str,
    principal: str,
    op: OperationRequest,
    call: Callable[[], HttpResponseBase],
) -> tuple[OpResult, HttpResponseBase | None]:
    """``op`` under its key in a transaction of ``using``: the claims' whole request."""
    made: list[tuple[OpResult, HttpResponseBase]] = []
    hooks = op.hooks if conf.test_hooks else None

    def handler() -> OpResult:
        if hooks is not None and hooks.delay_ms:
            time.sleep(hooks.delay)  # in progress, its claim held: the test's gap
        try:
            response = call()
        except Exception as exc:
            refused = refusal_of(exc)
            if refused is None:
                raise
            return refused
        if hooks is not None and hooks.fail:
            raise RuntimeError(f"{testhooks.FAIL}: failed after writing, key {op.key}")
        if hooks is not None and hooks.set_cookie is not None:
            response["Set-Cookie"] = hooks.set_cookie
        result = view_result(response)
        made.append((result, response))
        return result

    try:
        result = conf.claims.run(AtomicWork(using, conf.keyring), principal, op, handler)
    except Exception as exc:
        message, path = "view for %s %s failed", loggable(op.path)
        return server_error(
            "handler-failed", "the view failed", exc, log, message, op.method, path
        ), None
    for kept, response in made:
        if kept is result:
            return result, response
    return result, None


def idempotent(view: F | None = None, *, using: str = DEFAULT_DB_ALIAS) -> Any:
    """Decorate a view (a function, or ``View.as_view()``'s); ``using``: the database
    alias its writes go to, where its key is claimed (``"default"``). The view is left
    out of ``ATOMIC_REQUESTS``: pigeon opens and commits its transaction."""

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(
                "@idempotent takes a synchronous view: Django's transaction.atomic() is "
                "synchronous (an async view calls its ORM writes through sync_to_async)"
            )
        guarded = GuardedView(fn, using)

        @functools.wraps(fn)
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method.upper() not in WRITE_METHODS:
                return fn(request, *args, **kwargs)
            entry: BatchEntry | None = getattr(request, ENTRY, None)
            if entry is None:
                answered = guarded.answer(request, lambda: fn(request, *args, **kwargs))
            else:  # parsed with its batch: run as it is
                answered = entry.answer(request, using, lambda: fn(request, *args, **kwargs))
            result, own = answered
            return own if own is not None else response_of(result)

        wrapper.pigeon_view = guarded  # type: ignore[attr-defined]  # found by the batch
        return transaction.non_atomic_requests(using=using)(wrapper)  # type: ignore[no-any-return]

    return decorate if view is None else decorate(view)


ENTRY = "pigeon_batch_entry"  # the attribute of a batch entry's request


@dataclass
class BatchEntry:
    """A batch entry on its way through its view's decorators to ``@idempotent``."""

    conf: Configured
    op: OperationRequest
    result: OpResult | None = None

    def answer(
        self, request: Any, using: str, call: Callable[[], HttpResponseBase]
    ) -> tuple[OpResult, HttpResponseBase | None]:
        """The entry run by the view of ``request`` (its principal the view's to name)."""
        principal = principal_for(request, self.conf)
        if isinstance(principal, OpResult):
            answered: tuple[OpResult, HttpResponseBase | None] = (principal, None)
        else:
            answered = run(self.conf, using, principal, self.op, call)
        self.result = answered[0]
        return answered
