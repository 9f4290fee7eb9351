"""What makes two requests "the same request": the key's shape and the request fingerprint.

Pure functions, no I/O. The fingerprint covers method, path and the canonical JSON body,
so key order and whitespace in the body never turn a retry into a "different request",
and the same operation sent alone or inside a batch has the same fingerprint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from pigeon.core.printable import printable
from pigeon.core.wire import IDEMPOTENCY_KEY, MAX_KEY_LENGTH, canonical_json
from pigeon.exceptions import InvalidIdempotencyKey

__all__ = [
    "InvalidIdempotencyKey",
    "check_key",
    "fingerprint",
    "fingerprint_canonical",
    "validate_key",
]


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
    """A key taken from a header or a batch entry: 1 to 255 printable characters, not only
    spaces, as sent or in double quotes (``pigeon.server.contract.IDEMPOTENCY_KEY_SCHEMA``
    publishes this rule)."""
    if not isinstance(key, str):
        raise InvalidIdempotencyKey(f"{IDEMPOTENCY_KEY} must be a string, not {type(key).__name__}")
    if len(key) >= 2 and key[0] == key[-1] == '"':
        # The IETF draft sends the key as a structured-field string: "abc" is abc.
        key = key[1:-1]
    if not key.strip(" "):
        raise InvalidIdempotencyKey(f"{IDEMPOTENCY_KEY} must not be empty (nor only spaces)")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(
            f"{IDEMPOTENCY_KEY} is {len(key)} characters, at most {MAX_KEY_LENGTH} allowed"
        )
    if not printable(key):
        raise InvalidIdempotencyKey(f"{IDEMPOTENCY_KEY} must be printable text")
    return key


def fingerprint(method: str, path: str, body: Any) -> str:
    """A stable digest of (method, path, canonical JSON body)."""
    return fingerprint_canonical(method, path, canonical_json(body))


def fingerprint_canonical(method: str, path: str, canonical_body: str) -> str:
    """``fingerprint`` of a body its caller has in canonical JSON already."""
    text = "\n".join((method.upper(), path, canonical_body))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
