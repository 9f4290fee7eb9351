"""Who is asking. DEMO STAND-IN, NOT AUTHENTICATION, as ``pigeon serve --auth demo``:
``Authorization: Bearer <principal>.<anything>`` names the principal and nothing is
verified. A real project names the principal with its own authentication (the default
of ``PIGEON["PRINCIPAL"]`` is the signed-in user's primary key)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpResponse, JsonResponse

PROBLEM = "application/problem+json"


def bearer(request: Any) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def is_operator(request: Any) -> bool:
    token, expected = bearer(request), settings.OPERATOR_TOKEN
    return bool(token and expected and hmac.compare_digest(token, expected))


def principal(request: Any) -> str | None:
    """``PIGEON["PRINCIPAL"]``: what the middleware below found."""
    found: str | None = getattr(request, "principal", None)
    return found


class BearerPrincipal:
    """Sets ``request.principal``; refuses (401) a request without one unless anonymous
    requests are allowed. The operator's token is no user's."""

    def __init__(self, get_response: Callable[[Any], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> HttpResponse:
        token = bearer(request)
        if request.path.startswith(("/admin", "/pigeon/v1/health")) or is_operator(request):
            request.principal = None
            return self.get_response(request)
        if token is None and settings.NOTES_ALLOW_ANONYMOUS:
            request.principal = "anonymous"
        elif token is None or not token.partition(".")[0]:
            body = {
                "type": "urn:pigeon:problem:unauthorized",
                "title": "Unauthorized",
                "status": 401,
                "detail": "an Authorization: Bearer <principal>.<x> token is required",
            }
            return JsonResponse(body, status=401, content_type=PROBLEM)
        else:
            request.principal = token.partition(".")[0]
        return self.get_response(request)
