"""Request body limits of the intake's write routes: an over-large body is refused with
413 before it is read whole (a ``Content-Length`` over the limit before a byte of it is
read, a streamed one as soon as what arrived passes it), and before anything runs.

Defaults: the edge queue refuses payloads over 1 MiB of JSON (``OfflineQueue``'s
``max_payload_bytes``), and a single operation's body is that payload, so 2 MiB leaves
room for other clients' encodings; a batch carries up to ``MAX_BATCH`` operations, and a
client whose batch is refused with 413 sends it again in halves.
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect, Request

from pigeon.checks import is_int_in
from pigeon.exceptions import ConfigurationError
from pigeon.server.results import OpResult, problem_result

DEFAULT_MAX_BODY = 2 << 20  # bytes of one operation's request body
DEFAULT_MAX_BATCH_BODY = 16 << 20  # bytes of a batch request's body
TOO_LARGE = "body-too-large"  # problem type slug of the 413

log = logging.getLogger(__name__)


def checked_limit(name: str, value: object) -> int:
    """``value`` as a body limit in bytes, or a ConfigurationError naming ``name``."""
    if not is_int_in(value, 1):
        raise ConfigurationError(
            f"{name} must be a positive number of bytes, not {value!r}", field=name
        )
    return value


def checked_limits(
    max_body: object,
    max_batch_body: object,
    names: tuple[str, str] = ("max_body", "max_batch_body"),
) -> tuple[int, int]:
    """Both limits, each checked, and in order, or a ConfigurationError naming the one to
    blame (as ``names`` call them: a Django project's are its settings'). An operation
    the single route accepts must also fit in a batch of one: else the client, splitting
    a refused batch down to it, takes the batch route's 413 as permanent."""
    body_name, batch_name = names
    body = checked_limit(body_name, max_body)
    batch = checked_limit(batch_name, max_batch_body)
    if batch < body:
        raise ConfigurationError(
            f"{batch_name} ({batch}) must be at least {body_name} ({body}): "
            "an operation must fit in a batch of one",
            field=batch_name,
        )
    return body, batch


def too_large(what: str, limit: int, seen: str) -> OpResult:
    return problem_result(
        413,
        TOO_LARGE,
        "Request body too large",
        f"{what} may have at most {limit} bytes of body; {seen}. Nothing was executed",
        max_bytes=limit,
    )


def declared_too_large(declared: str | None, limit: int, what: str) -> OpResult | None:
    """The 413 for a body whose Content-Length (``declared``) is over ``limit``: answered
    before a byte of it is read."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return too_large(what, limit, f"its Content-Length is {int(declared)}")
    return None


async def read_body(request: Request, limit: int, what: str) -> bytes | OpResult:
    """The request body, read while counting, or the 413 that refuses it."""
    buffer = await read_buffer(request, limit, what)
    return buffer if isinstance(buffer, OpResult) else bytes(buffer)


async def read_buffer(request: Request, limit: int, what: str) -> bytearray | OpResult:
    """``read_body`` into one growing buffer: no list of chunks joined into a second copy
    at the end, which for a 16 MiB batch was 16 MiB more at once."""
    refused = declared_too_large(request.headers.get("content-length"), limit, what)
    if refused is not None:
        return refused
    buffer = bytearray()
    try:
        async for chunk in request.stream():
            if len(buffer) + len(chunk) > limit:
                # The rest is never read here: the server discards it, it is not kept.
                seen = len(buffer) + len(chunk)
                return too_large(what, limit, f"{seen} bytes had arrived when it was refused")
            buffer += chunk
    except ClientDisconnect:
        # The client hung up (or the server's body timeout closed the connection) before
        # the body was whole: an everyday event on a phone's network, not a server error.
        # One line, no traceback; nothing ran, and no one is left to answer.
        log.info("%s ended after %d bytes of its body: the connection closed", what, len(buffer))
        return problem_result(
            400, "incomplete-body", "Incomplete body", "the connection closed mid-body"
        )
    return buffer
