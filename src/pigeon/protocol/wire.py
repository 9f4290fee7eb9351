"""Names and shapes of the wire protocol (DESIGN.md, "Wire protocol"). No I/O here.

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
``Retry-After``) and ``PROBLEM_VERSION_CONFLICT`` (the ``If-Match`` version is stale; the
body's ``current`` member holds the server's version of the entity when it has one).
412 always means a version conflict. A 409 without a known ``type`` is read as "key in
progress" when it carries ``Retry-After`` and as a version conflict otherwise.
"""

from __future__ import annotations

import json
from typing import Any

IDEMPOTENCY_KEY = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
IF_MATCH = "If-Match"
ETAG = "ETag"
RETRY_AFTER = "Retry-After"
CLOCK = "X-Pigeon-Clock"
BATCH_PATH = "/pigeon/v1/batch"
HEALTH_PATH = "/pigeon/v1/health"
MAX_KEY_LENGTH = 255
PROBLEM_JSON = "application/problem+json"

_PROBLEMS = "https://pigeon.dev/problems/"
PROBLEM_KEY_MISSING = _PROBLEMS + "idempotency-key-missing"  # 400: absent or malformed key
PROBLEM_KEY_IN_PROGRESS = _PROBLEMS + "key-in-progress"  # 409 + Retry-After
PROBLEM_KEY_MISMATCH = _PROBLEMS + "key-reused"  # 422: same key, different fingerprint
PROBLEM_VERSION_CONFLICT = _PROBLEMS + "version-conflict"  # 409 or 412: stale If-Match
PROBLEM_UNAVAILABLE = _PROBLEMS + "store-unavailable"  # 503: intake fails closed


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: key order and spacing never change it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def quote_etag(version: str) -> str:
    return version if version.startswith('"') or version.startswith('W/"') else f'"{version}"'


def unquote_etag(value: str) -> str:
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value
