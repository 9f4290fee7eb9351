"""Names and shapes of the wire protocol (docs/design.md, "Wire protocol"). No I/O here.

One operation: the operation's own method and path, JSON body, headers
``Idempotency-Key`` (always), ``If-Match: "<v>"`` (update/delete with a known base
version) and ``X-Pigeon-Clock`` (the operation's hybrid logical clock stamp).

Batch: ``POST /pigeon/v1/batch`` with ``{"operations": [op, ...]}``, where each op is
``{"id", "idempotency_key", "type", "entity", "method", "path", "body", "clock",
"if_match"?}``. The answer is ``{"results": [result, ...]}`` with one result per
operation the server processed, in order: ``{"id", "status", "body", "replayed",
"headers"}``. The server stops at the first transient failure, so ``results`` may be
shorter than ``operations``; the rest were not attempted. A result's ``headers`` carry
at least ``ETag`` (the entity's new version) and ``Retry-After`` when the server sent them.

Problems (RFC 9457, ``application/problem+json``) carry a ``type`` URI from the
``PROBLEM_*`` constants below. Two of them share status 409 and are told apart only by
``type``: ``PROBLEM_KEY_IN_PROGRESS`` (send the same request again later, with
``Retry-After``) and any other 409, such as ``PROBLEM_VERSION_CONFLICT``, which the
client hands to the conflict resolver. 412 (``If-Match`` is stale; the body holds the
server's current version) always means a version conflict. A 409 with no ``type`` is
read as "key in progress" when it carries ``Retry-After`` and as a conflict otherwise.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any

from pigeon.core.jsontext import one_encoder

IDEMPOTENCY_KEY = "Idempotency-Key"
# The requests an Idempotency-Key is for: what the edge may send, what an intake serves.
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
REPLAYED = "Idempotent-Replayed"
IF_MATCH = "If-Match"
ETAG = "ETag"
RETRY_AFTER = "Retry-After"
CLOCK = "X-Pigeon-Clock"
BATCH_PATH = "/pigeon/v1/batch"
MAX_BATCH = 1000  # operations per batch request; the server refuses more with 400
HEALTH_PATH = "/pigeon/v1/health"
MAX_KEY_LENGTH = 255
# JSON nesting a body may have (the server's decoder refuses deeper with 400): far beyond
# any operation's data, far below Python's recursion limit. The edge refuses deeper
# payloads at enqueue, so what it stores is what the server will read.
MAX_JSON_DEPTH = 200
PROBLEM_JSON = "application/problem+json"
# 4xx the client sends again with the same key: transient (retry later), and the
# authorisation statuses (the queue pauses until the user signs in, then resumes). The
# server must therefore never store them as a key's final answer.
TRANSIENT_4XX = frozenset({408, 425, 429})
AUTH_STATUSES = frozenset({401, 403})

# Problem types are URNs: stable, and not tied to a host (pigeon.server.problems makes
# them as PROBLEM_PREFIX + slug).
PROBLEM_PREFIX = "urn:pigeon:problem:"
PROBLEM_KEY_MISSING = PROBLEM_PREFIX + "bad-idempotency-key"  # 400: absent or malformed key
PROBLEM_KEY_IN_PROGRESS = PROBLEM_PREFIX + "key-in-progress"  # 409 + Retry-After
PROBLEM_KEY_MISMATCH = PROBLEM_PREFIX + "key-reused"  # 422: same key, different fingerprint
PROBLEM_VERSION_CONFLICT = PROBLEM_PREFIX + "version-conflict"  # 409: stale version
PROBLEM_UNAVAILABLE = PROBLEM_PREFIX + "store-unavailable"  # 503: intake fails closed


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# Every operation's body is encoded here once, for its fingerprint (IntakeContext.body_json).
_ENCODE = one_encoder(_CANONICAL)


class CanonicalJson(str):
    """Text already in canonical JSON (what ``canonical_json`` makes), such as an answer a
    handler spliced from parts it had encoded anyway: ``canonical_json`` returns it as it
    is instead of encoding it as a JSON string."""

    __slots__ = ()


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: key order and spacing never change it."""
    if type(value) is CanonicalJson:
        return str(value)
    return _ENCODE(value)


def without_member(text: str, key: str, value: str) -> str | None:
    """``text``, the canonical JSON of an object that holds the member ``key``: ``value``
    (a string), without that member: what ``canonical_json`` writes for the object
    without it, cut from text already made instead of encoded again. None when the
    member's text is in ``text`` more than once (a nested object holds it too, or a key
    that ends in an escaped quote and the key's name), which only an encode tells apart;
    found once, it is the object's own, which is there."""
    member = f"{encode_basestring(key)}:{encode_basestring(value)}"
    at = text.find(member)
    if at < 0 or text.find(member, at + 1) >= 0:
        return None
    end = at + len(member)
    if text[end] == ",":  # a member after it
        return text[:at] + text[end + 1 :]
    if text[at - 1] == ",":  # the last of several
        return text[: at - 1] + text[end:]
    return text[:at] + text[end:]  # the only one: "{}"


def quote_etag(version: str) -> str:
    return version if version.startswith(('"', 'W/"')) else f'"{version}"'


def unquote_etag(value: str) -> str:
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value
