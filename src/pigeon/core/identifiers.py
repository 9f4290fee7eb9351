"""Identifiers both halves write the same way: a value percent-encoded as one path segment
(every reserved character too). The edge's default routes build ``/notes/<id>`` with it,
the server's handlers their ``Location`` headers, so the two cannot drift apart."""

from __future__ import annotations

import re
from urllib.parse import quote

_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]+")
_plain = _UNRESERVED.fullmatch  # hot path: path_segment runs twice an enqueue


def path_segment(segment: str) -> str:
    """``segment`` quoted for a URL path (``quote(segment, safe="")``, without calling
    quote() for a plain segment)."""
    return segment if _plain(segment) else quote(segment, safe="")
