"""A Django request read as the intake reads one, a view's response as the answer pigeon
stores, and a stored answer (or a refusal, problem+json) as the response sent."""

from __future__ import annotations

import ipaddress
from typing import Any, cast

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
from pigeon.server.messages import parse_operation
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


def _loopback(request: Any) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def operation_of(request: Any, conf: Configured) -> OperationRequest | OpResult:
    """The operation ``request`` carries, or the refusal (400, 413, 415) that answers it
    before anything runs; the body's size is checked before Django reads it."""
    declared = str(request.META.get("CONTENT_LENGTH") or "")
    if declared.isdigit() and int(declared) > conf.max_body:
        return too_large(WHAT, conf.max_body, f"its Content-Length is {int(declared)}")
    try:
        raw = request.body
    except RequestDataTooBig:
        return too_large(WHAT, conf.max_body, "it is over DATA_UPLOAD_MAX_MEMORY_SIZE")
    return parse_operation(
        request.method,
        request.path_info,
        headers_of(request),
        raw,
        max_body=conf.max_body,
        test_hooks=conf.test_hooks and _loopback(request),
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
