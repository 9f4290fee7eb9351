"""Query parameters of the reference app's read routes, refused by name when malformed."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response

from pigeon.server.problems import problem, problem_response

MAX_SEQ = 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")


def integer_param(
    request: Request, name: str, default: int, low: int = 0, high: int = MAX_SEQ
) -> int | Response:
    """An integer query parameter within [low, high], or the 400 problem naming it."""
    text = request.query_params.get(name)
    if text is None:
        return default
    value: int | None = None
    if _INTEGER.fullmatch(text):  # ASCII digits only: int() also takes '١' and '1_0'
        value = int(text)
    if value is None or not low <= value <= high:
        detail = (
            f"query parameter {name!r} must be an integer from {low} to {high}, not {text[:40]!r}"
        )
        return problem_response(problem(400, "bad-query", "Bad request", detail))
    return value
