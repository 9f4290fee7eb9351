"""What makes two requests "the same request": the key's shape and the request fingerprint.

Pure functions, no I/O. The fingerprint covers method, path and the canonical JSON body,
so key order and whitespace in the body never turn a retry into a "different request",
and the same operation sent alone or inside a batch has the same fingerprint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from pigeon.core.wire import IDEMPOTENCY_KEY, MAX_KEY_LENGTH, canonical_json
from pigeon.exceptions import InvalidIdempotencyKey

__all__ = ["InvalidIdempotencyKey", "check_key", "fingerprint", "validate_key"]


def validate_key(values: Sequence[str]) -> str:
    """The one key carried by a request, given every value of the header it sent.

    Two header lines are refused rather than picking one: the client and any proxy in
    between could disagree on which one counts.
    """
    if not values:
        raise InvalidIdempotencyKey(f"the {IDEMPOTENCY_KEY} header is required")
    if len(values) > 1:
        raise InvalidIdempotencyKey(
            f"the {IDEMPOTENCY_KEY} header must appear once, it appeared {len(values)} times"
        )
    return check_key(values[0])


def check_key(key: object) -> str:
    """A key taken from a header or a batch entry: a non-empty string of at most 255 chars."""
    if not isinstance(key, str):
        raise InvalidIdempotencyKey(f"{IDEMPOTENCY_KEY} must be a string, not {type(key).__name__}")
    stripped = key.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == '"':
        # The IETF draft sends the key as a structured-field string: "abc" is abc.
        stripped = stripped[1:-1]
    if not stripped:
        raise InvalidIdempotencyKey(f"{IDEMPOTENCY_KEY} must not be empty")
    if len(stripped) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(
            f"{IDEMPOTENCY_KEY} is {len(stripped)} characters, at most {MAX_KEY_LENGTH} allowed"
        )
    if not stripped.isprintable():
        raise InvalidIdempotencyKey(f"{IDEMPOTENCY_KEY} must be printable text")
    return stripped


def fingerprint(method: str, path: str, body: Any) -> str:
    """A stable digest of (method, path, canonical JSON body)."""
    text = "\n".join((method.upper(), path, canonical_json(body)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
