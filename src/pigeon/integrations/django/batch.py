"""``POST /pigeon/v1/batch`` for a Django project: the edge's batches, each operation
sent to the ``@idempotent`` view its path resolves to, in order.

    urlpatterns = [path("pigeon/v1/batch", batch_view), ...]

Each entry is parsed as the intake parses one (`pigeon.server.batch_wire.read_batch`),
runs under its own key in a transaction of its own through its view's decorators, and
gets one result in the answer the intake gives (`pigeon.server.batch_wire.results_json`).
The batch stops after the first result that says "not now" (a 5xx, a 409 in progress,
401/403/408/425/429): nothing after it overtakes it. A crash leaves the entries before
it committed; the resent batch replays them.
"""

from __future__ import annotations

import copy
from typing import Any

from django.http import HttpResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt

from pigeon.core.wire import WRITE_METHODS, canonical_json, quote_etag
from pigeon.integrations.django.answers import body_of, response_of, view_result
from pigeon.integrations.django.conf import Configured, configured
from pigeon.integrations.django.views import ENTRY, BatchEntry
from pigeon.server.batch_wire import Batch, read_batch, results_json
from pigeon.server.operations import OperationRequest
from pigeon.server.results import OpResult, problem_result, stored

WHAT = "a batch request"


@csrf_exempt
def batch_view(request: Any) -> HttpResponse:
    """The batch route (a view: ``path("pigeon/v1/batch", batch_view)``)."""
    if request.method != "POST":
        refused = problem_result(
            405, "method-not-allowed", "Method not allowed", "a batch is sent with POST"
        )
        response = response_of(refused)
        response["Allow"] = "POST"
        return response
    conf = configured()
    batch = _read(request)
    if isinstance(batch, OpResult):
        return response_of(batch)
    ids, ops = batch
    results: list[OpResult] = []
    for op in ops:
        result = op if isinstance(op, OpResult) else _apply(request, conf, op)
        results.append(result)
        if result.transient or not stored(result.status):
            break
    return HttpResponse(bytes(results_json(ids, results)), content_type="application/json")


def _read(request: Any) -> Batch | OpResult:
    """The batch, or the refusal of its body (nothing runs)."""
    raw = body_of(request, configured().max_batch_body, WHAT)
    return raw if isinstance(raw, OpResult) else read_batch([raw])


def _apply(request: Any, conf: Configured, op: OperationRequest) -> OpResult:
    """One entry through the view its path resolves to (its decorators included)."""
    if op.method not in WRITE_METHODS:  # a read takes no key, and is no operation
        return problem_result(
            405, "method-not-allowed", "Method not allowed", f"{op.method} is not an operation"
        )
    try:
        match = resolve(op.path, getattr(request, "urlconf", None))
    except Resolver404:
        match = None
    if match is None or not guarded(match.func, op.method):
        return problem_result(
            404, "no-such-operation", "Not found", f"no operation {op.method} {op.path}"
        )
    raw = b"" if op.body is None else canonical_json(op.body).encode("utf-8")
    entry = BatchEntry(conf, op)
    sub = sub_request(request, entry, raw)
    sub.resolver_match = match
    response = match.func(sub, *match.args, **match.kwargs)
    # The view's own decorators may answer first (a method it does not take): as sent.
    return entry.result if entry.result is not None else view_result(response)


def guarded(view: Any, method: str) -> bool:
    """Does ``view`` take ``method`` under ``@idempotent``: a function view, or a class
    view's handler (a DRF viewset's by its action) under ``@idempotent_action``?"""
    if getattr(view, "pigeon_view", None) is not None:
        return True
    actions = getattr(view, "actions", None) or {}
    name = actions.get(method.lower(), method.lower())
    handler = getattr(getattr(view, "view_class", None), name, None)
    return getattr(handler, "pigeon_view", None) is not None


def sub_request(request: Any, entry: BatchEntry, raw: bytes) -> Any:
    """A batch entry as a request of its own to its view: the batch request's user,
    session and attributes, the entry's method, path, body and headers."""
    op = entry.op
    sub = copy.copy(request)
    for cached in ("headers", "GET", "POST", "FILES", "COOKIES", "_post", "_files"):
        sub.__dict__.pop(cached, None)
    meta = {k: v for k, v in request.META.items() if k not in _ENTRY_META}
    meta |= {
        "REQUEST_METHOD": op.method,
        "PATH_INFO": op.path,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw)),
        "QUERY_STRING": "",
        "HTTP_IDEMPOTENCY_KEY": op.key,
        "HTTP_X_PIGEON_OPERATION_ID": op.operation_id,
    }
    if op.if_match is not None:
        meta["HTTP_IF_MATCH"] = quote_etag(op.if_match)
    if op.clock is not None:
        meta["HTTP_X_PIGEON_CLOCK"] = op.clock
    sub.META = meta
    sub.method = op.method
    sub.path = sub.path_info = op.path
    sub._body = raw
    sub._read_started = False
    sub.resolver_match = None
    setattr(sub, ENTRY, entry)
    return sub


# What a batch entry brings of its own, never taken from the batch request.
_ENTRY_META = frozenset(
    {
        "CONTENT_TYPE",
        "CONTENT_LENGTH",
        "HTTP_IDEMPOTENCY_KEY",
        "HTTP_IF_MATCH",
        "HTTP_X_PIGEON_CLOCK",
        "HTTP_X_PIGEON_OPERATION_ID",
        "HTTP_X_PIGEON_TEST_DELAY_MS",
        "HTTP_X_PIGEON_TEST_FAIL",
        "HTTP_X_PIGEON_TEST_SET_COOKIE",
    }
)
