"""Names and shapes of the wire protocol (DESIGN.md, "Wire protocol"). No I/O here.

One operation: the operation's own method and path, JSON body, headers
``Idempotency-Key`` (always), ``If-Match: "<v>"`` (update/delete with a known base
version) and ``X-Pigeon-Clock`` (the operation's hybrid logical clock stamp).

Batch: ``POST /pigeon/v1/batch`` with ``{"operations": [op, ...]}``, where each op is
``{"id", "idempotency_key", "type", "entity", "method", "path", "body", "clock",
"if_match"?}``. The answer is ``{"results": [result, ...]}`` with one result per
operation the server processed, in order: ``{"id", "status", "body", "replayed",
"headers"}``. The server stops at the first transient failure, so ``results`` may be
shorter than ``operations``; the rest were not attempted.
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
