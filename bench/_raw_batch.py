"""What the raw intake apps (bench/_raw_intake_app.py, bench/_raw_pg_app.py) make of a
batch of creates around their SQL: its claims, its notes' rows and data before, and the
ledger rows and answers once the notes are written."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

Entries = list[dict[str, Any]]


def creates(count: int, size: int, tag: str) -> list[Entries]:
    """``count`` batches of ``size`` creates as the batch endpoint takes them, each key and
    note new (``tag``-batch-entry)."""
    return [
        [
            {
                "idempotency_key": f"{tag}-{i}-{j}",
                "method": "POST",
                "path": "/notes",
                "body": {"id": f"{tag}-{i}-{j}", "title": "shopping list", "body": "milk"},
            }
            for j in range(size)
        ]
        for i in range(count)
    ]


def fingerprint(body: Any) -> str:
    """A create's fingerprint (POST /notes), as the intake takes it."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"POST\n/notes\n{canonical}".encode()).hexdigest()


def planned(entries: Entries) -> tuple[list[list[Any]], list[list[Any]], list[dict[str, Any]]]:
    """Each entry's claim [key, fingerprint, method, path, operation id], its note's row
    [id, data (JSON text), clock], and its note's data."""
    claims, notes, datas = [], [], []
    for e in entries:
        key, body = e["idempotency_key"], e["body"]
        claims.append([key, fingerprint(body), "POST", "/notes", key])
        data = {k: v for k, v in body.items() if k != "id"}
        datas.append(data)
        notes.append([body["id"], json.dumps(data), "0"])
    return claims, notes, datas


def answered(
    entries: Entries, datas: list[dict[str, Any]], made: Mapping[str, int]
) -> tuple[list[list[Any]], list[str], list[dict[str, Any]]]:
    """Once the notes are written (``made``: each id's version), each entry's ledger row
    [key, operation id, entity, method, status, version, clock], its answer's JSON text
    (what its claim stores), and its result in the batch's reply."""
    ledger, answers, out = [], [], []
    for e, data in zip(entries, datas, strict=True):
        key, note_id = e["idempotency_key"], e["body"]["id"]
        version = made[note_id]
        ledger.append([key, key, f"note:{note_id}", "POST", 201, version, "0"])
        answer = {"id": note_id, "version": version, **data}
        answers.append(json.dumps(answer))
        out.append({"id": e.get("id"), "status": 201, "body": answer})
    return ledger, answers, out
