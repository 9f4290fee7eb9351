"""What the raw intake apps (bench/_raw_intake_app.py, bench/_raw_pg_app.py) make of a
batch of creates before their SQL: its claims, its notes' rows, and each note's data."""

from __future__ import annotations

import hashlib
import json
from typing import Any

Entries = list[dict[str, Any]]


def planned(entries: Entries) -> tuple[list[list[Any]], list[list[Any]], list[dict[str, Any]]]:
    """Each entry's claim [key, fingerprint, method, path, operation id], its note's row
    [id, data (JSON text), clock], and its note's data."""
    claims, notes, datas = [], [], []
    for e in entries:
        key, body = e["idempotency_key"], e["body"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"POST\n/notes\n{canonical}".encode()).hexdigest()
        claims.append([key, digest, "POST", "/notes", key])
        data = {k: v for k, v in body.items() if k != "id"}
        datas.append(data)
        notes.append([body["id"], json.dumps(data), "0"])
    return claims, notes, datas
