"""RFC 9457 problem details (``application/problem+json``) for every refusal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from pigeon.core.wire import PROBLEM_JSON, PROBLEM_PREFIX


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    # A URN rather than a URL: the type must be stable and must not depend on a host.
    return {
        "type": PROBLEM_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


def problem_response(
    body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        dict(body), status_code=int(body["status"]), headers=headers, media_type=PROBLEM_JSON
    )
