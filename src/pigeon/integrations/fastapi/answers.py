"""What a FastAPI handler returned, as the answer pigeon stores; a stored answer, as the
response sent; and the refusals as the OpenAPI document lists them."""

from __future__ import annotations

from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from pigeon.core.wire import PROBLEM_JSON
from pigeon.server.results import OpResult

# Headers of the connection, not of the answer: recomputed for every reply.
_UNSTORED = frozenset({b"content-length", b"transfer-encoding", b"connection"})

_PROBLEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "operation_id": {"type": "string"},
        "error_id": {"type": "string"},
    },
    "required": ["type", "title", "status", "detail"],
}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {PROBLEM_JSON: {"schema": _PROBLEM}}}


PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: _problem("The Idempotency-Key is missing or malformed, or the body is no strict JSON."),
    409: _problem(
        "A request with this Idempotency-Key is still in progress: retry after Retry-After."
    ),
    413: _problem("The body is larger than the server takes."),
    415: _problem("The body is not JSON."),
    422: _problem("This Idempotency-Key was used for a different request."),
    503: _problem("The idempotency store cannot be reached: nothing ran."),
}


def result_of(returned: Any, status: int) -> OpResult:
    """A handler's return value as the answer to store: a ``Response`` as it is, anything
    else as FastAPI's ``JSONResponse`` of it with the route's ``status``."""
    if not isinstance(returned, Response):
        returned = JSONResponse(jsonable_encoder(returned), status_code=status)
    body = getattr(returned, "body", None)
    if not isinstance(body, bytes | memoryview):
        raise TypeError(
            f"an @idempotent handler answers with its whole body, not a {type(returned).__name__}"
        )
    headers = tuple(
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in returned.raw_headers
        if name.lower() not in _UNSTORED
    )
    return OpResult(returned.status_code, bytes(body).decode("utf-8"), headers)


def answer(result: OpResult) -> Response:
    """The response that sends ``result`` (a replay's headers included)."""
    response = Response(content=result.body_text.encode("utf-8"), status_code=result.status)
    response.raw_headers.extend(
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in result.headers
    )
    return response
