"""A Django request read as the intake reads one, a view's response as the answer pigeon
stores, and a stored answer (or a refusal, problem+json) as the response sent."""

from __future__ import annotations

import ipaddress
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.http import Http404, HttpResponse
from django.http.response import HttpResponseBase
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from pigeon.exceptions import AuthorizationRequired
from pigeon.integrations.django.conf import Configured
from pigeon.server.auth import principal_of
from pigeon.server.limits import too_large
from pigeon.server.messages import (
    head_refusal,
    parse_operation,
    refused_unread,
    unsupported_media,
)
from pigeon.server.operations import OperationRequest
from pigeon.server.results import OpResult, problem_result

# Headers of the connection, not of the answer: recomputed for every reply.
UNSTORED = frozenset({"content-length", "transfer-encoding", "connection"})
WHAT = "one operation's request"


def headers_of(request: Any) -> Headers:
    """The request's headers as the intake reads them (Django joins a repeated header
    into one value, as its servers hand it over)."""
    return Headers(
        raw=[
            (name.lower().encode("latin-1"), str(value).encode("latin-1"))
            for name, value in request.headers.items()
        ]
    )


def test_hooks_for(conf: Configured, address: str) -> bool:
    """Are the fault switch's headers read for a request from ``address``: only when the
    settings turn them on, and only from a loopback address."""
    try:
        return conf.test_hooks and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def capped(limit: int) -> int:
    """``limit`` lowered to Django's own, ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (None: none)."""
    cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return limit if cap is None else min(limit, cap)


def body_of(request: Any, limit: int, what: str) -> bytes | OpResult:
    """The body of ``request``, or the refusal that answers it before anything runs, in
    the order of ``pigeon serve`` (`refused_unread`): its type, then its size, before
    Django reads it. Django's own cap (``DATA_UPLOAD_MAX_MEMORY_SIZE``) lowers ``limit``,
    and passing it is a 413 like any other: the edge splits a batch it refuses, where
    Django's own 400 page paused its queue."""
    limit = capped(limit)
    media = request.META.get("CONTENT_TYPE") or None
    refused = refused_unread(media, str(request.META.get("CONTENT_LENGTH") or ""), limit, what)
    if refused is not None:
        return refused
    try:
        raw: bytes = request.body
    except RequestDataTooBig:  # a body without a Content-Length
        return too_large(what, limit, "it is over DATA_UPLOAD_MAX_MEMORY_SIZE")
    return unsupported_media(media, raw) or raw


def operation_of(request: Any, conf: Configured) -> OperationRequest | OpResult:
    """The operation ``request`` carries, or the refusal (400, 413, 415) that answers it
    before anything runs, in ``pigeon serve``'s order: its key, then its body
    (``body_of``), then the rest."""
    headers = headers_of(request)
    hooks = test_hooks_for(conf, request.META.get("REMOTE_ADDR", ""))
    raw = head_refusal(headers, hooks) or body_of(request, conf.max_body, WHAT)
    if isinstance(raw, OpResult):
        return raw
    return parse_operation(
        request.method, request.path_info, headers, raw, max_body=conf.max_body, test_hooks=hooks
    )


def principal_for(request: Any, conf: Configured) -> str | OpResult:
    """Who sends ``request`` (``PIGEON["PRINCIPAL"]``; ``anonymous`` without one), by the
    intake's rules of a principal, or the 401 refusing one that cannot scope a key."""
    named = conf.principal(request)
    try:
        found = principal_of(lambda _: named, cast(HTTPConnection, request), allow_anonymous=True)
    except AuthorizationRequired as exc:
        return problem_result(401, "unauthorized", "Unauthorized", str(exc))
    assert found is not None
    return found


def view_result(response: HttpResponseBase) -> OpResult:
    """A view's response as the answer to store: its status, text and headers (cookies
    are the connection's: never stored)."""
    if response.streaming:
        raise TypeError("an @idempotent view answers with its whole body, not a stream")
    render = getattr(response, "render", None)
    if render is not None and not getattr(response, "is_rendered", True):
        render()
    try:
        text = response.content.decode("utf-8")
    except UnicodeDecodeError:
        raise TypeError("an @idempotent view answers with text (UTF-8), not bytes") from None
    headers = tuple(
        (name.lower(), value) for name, value in response.items() if name.lower() not in UNSTORED
    )
    return OpResult(response.status_code, text, headers)


def response_of(result: OpResult) -> HttpResponse:
    """The response that sends ``result`` (a replay's headers included)."""
    headers = dict(result.headers)
    media = headers.pop("content-type", "application/json")
    response = HttpResponse(result.body_text.encode("utf-8"), status=result.status)
    response["Content-Type"] = media
    for name, value in headers.items():
        response[name] = value
    return response


def refusal_of(exc: Exception) -> OpResult | None:
    """Django's exceptions that answer a request as problems (what Django's own handler
    makes of them): 404, 403, 400; None for any other."""
    if isinstance(exc, Http404):
        return problem_result(404, "not-found", "Not found", "no such resource")
    if isinstance(exc, PermissionDenied):
        return problem_result(403, "forbidden", "Forbidden", "this operation is not allowed")
    if isinstance(exc, BadRequest | SuspiciousOperation):
        return problem_result(400, "bad-request", "Bad request", "the request was refused")
    return None
