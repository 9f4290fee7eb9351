"""The notes app's set-based writes (`pigeon.server.intake_set`): many creates of a batch
in one statement for the notes and one for their ledger rows, each answered as
`pigeon.reference.notes.create_note` answers it alone.

What the one-note handler answers otherwise is left to it (None): a body it would refuse,
a second create of an id within the call, and an id a live note has already (409 with
the note); the intake runs those one by one after the others.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from json.encoder import encode_basestring as _string  # as canonical_json writes a string
from typing import Any

from pigeon.core.wire import ETAG, CanonicalJson, canonical_json, quote_etag
from pigeon.reference import schema as ref
from pigeon.server.identifiers import InvalidIdentifier, path_segment, resource_id
from pigeon.server.operations import HandlerResult, IntakeContext
from pigeon.storage.base import Tx
from pigeon.storage.sealed import NOTE_DATA

NOTE_AD = NOTE_DATA.ad  # as pigeon.reference.notes seals a note's data

__all__ = ["create_notes"]


def create_notes(tx: Tx, items: Sequence[IntakeContext]) -> list[HandlerResult | None]:
    """``POST /notes`` for many operations of one principal at once."""
    out: list[HandlerResult | None] = [None] * len(items)
    planned = _planned(items)
    if not planned:
        return out
    principal, now = items[0].principal, items[0].now
    seal = tx.cipher.seal
    notes = [
        [note_id, seal(data, *NOTE_AD, principal, note_id), items[i].clock]
        for i, note_id, data in planned
    ]
    params = {"principal": principal, "notes": json.dumps(notes), "now": now}
    made = {r["id"]: r for r in ref.fetchall(tx, "notes_create_many", params)}
    ledger: list[list[Any]] = []
    for i, note_id, data in planned:
        row = made.get(note_id)
        if row is None:  # a live note has the id: create_note answers 409 with it
            continue
        ctx, version = items[i], int(row["version"])
        entity = ctx.entity or f"note:{note_id}"
        ledger.append(
            [ctx.idempotency_key, ctx.operation_id, entity, ctx.method, 201, version, ctx.clock]
        )
        location = "/notes/" + path_segment(note_id)
        body = _answer(note_id, version, data, ctx.clock, row["updated_at"])
        out[i] = 201, body, {ETAG: quote_etag(str(version)), "Location": location}
    if ledger:
        entries = {"principal": principal, "entries": json.dumps(ledger), "now": now}
        ref.execute(tx, "ledger_append_many", entries)
    return out


def _planned(items: Sequence[IntakeContext]) -> list[tuple[int, str, str]]:
    """(index, note id, data) of each item to create here: its body a note (an object
    whose id, if any, is one: validate_note's rules, which the route checks before the
    claim), its id not named by an earlier item (none: a new one, as create_note gives)."""
    seen: set[str] = set()
    planned: list[tuple[int, str, str]] = []
    for i, ctx in enumerate(items):
        body = ctx.body
        if not isinstance(body, dict):
            continue
        raw_id = body.get("id")
        try:
            note_id = resource_id(raw_id) if raw_id not in (None, "") else uuid.uuid4().hex
        except InvalidIdentifier:
            continue
        if note_id in seen:
            continue
        seen.add(note_id)
        planned.append((i, note_id, canonical_json({k: v for k, v in body.items() if k != "id"})))
    return planned


def _answer(note_id: str, version: int, data: str, clock: str, updated_at: float) -> CanonicalJson:
    """create_note's answer (note_json, canonical: keys in order) with the data's text as
    it is stored, encoded once."""
    return CanonicalJson(
        f'{{"clock":{_string(clock)},"data":{data},"id":{_string(note_id)},'
        f'"updated_at":{updated_at!r},"version":{version!r}}}'
    )
