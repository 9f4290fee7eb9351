"""The notes app's set-based writes (`pigeon.server.intake_set`): many creates, replaces,
patches or deletes of a batch in a statement or two for the notes and one for their ledger
rows, each answered as `pigeon.reference.notes` answers it alone (``create_note``,
``replace_note``, ``patch_note``, ``delete_note``).

What the one-note handler answers otherwise is left to it (None): a body it would refuse,
a second write of an id within the call, a create of an id a live note has (409 with the
note; on PostgreSQL a deleted one's too, which create_note brings back), a replace or
delete of a note that is not there (404) or whose version ``If-Match`` does not name
(412); the intake runs those one by one after the others.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from json.encoder import encode_basestring as _string  # as canonical_json writes a string
from typing import Any, Literal

from pigeon.core.wire import ETAG, CanonicalJson, canonical_json, quote_etag, without_member
from pigeon.edge.merge import merge_patch
from pigeon.reference import schema as ref
from pigeon.reference.notes_reads import NOTE_AD, if_match_allows
from pigeon.server.identifiers import InvalidIdentifier, path_segment, resource_id
from pigeon.server.operations import HandlerResult, IntakeContext
from pigeon.storage.base import Tx

__all__ = ["create_notes", "delete_notes", "patch_notes", "replace_notes"]

# A planned write of an existing note: (item's index, note id, data text, deleted); the
# text None keeps the stored bytes (a delete's).
_Write = tuple[int, str, str | None, bool]
# What a write of an existing note makes of it.
_Kind = Literal["replace", "patch", "delete"]


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
    stamps = _Stamps()
    for i, note_id, data in planned:
        row = made.get(note_id)
        if row is None:  # the id has a note (on PostgreSQL, a deleted one too): create_note
            continue  # answers it one by one
        ctx, version = items[i], int(row["version"])
        entity = ctx.entity or f"note:{note_id}"
        ledger.append(
            [ctx.idempotency_key, ctx.operation_id, entity, ctx.method, 201, version, ctx.clock]
        )
        location = "/notes/" + path_segment(note_id)
        body = _answer(note_id, version, data, ctx.clock, stamps[row["updated_at"]])
        out[i] = 201, body, {ETAG: quote_etag(str(version)), "Location": location}
    if ledger:
        ref.execute_rows_later(tx, "ledger_append_many", ledger, principal=principal, now=now)
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
        planned.append((i, note_id, _data_text(ctx)))
    return planned


def _data_text(ctx: IntakeContext) -> str:
    """The note's data, as canonical JSON: the body (an object) without its id, cut from
    the body's own text where the intake made it (`IntakeContext.body_json`), so that
    the body is encoded once."""
    body, text = ctx.body, ctx.body_json
    if text is not None:
        if "id" not in body:
            return text
        raw_id = body["id"]
        if type(raw_id) is str and (cut := without_member(text, "id", raw_id)) is not None:
            return cut
    return canonical_json({k: v for k, v in body.items() if k != "id"})


def _answer(note_id: str, version: int, data: str, clock: str, updated_at: str) -> CanonicalJson:
    """create_note's answer (note_json, canonical: keys in order) with the data's text as
    it is stored, encoded once; ``updated_at``: the time's JSON text (`_Stamps`)."""
    return CanonicalJson(
        f'{{"clock":{_string(clock)},"data":{data},"id":{_string(note_id)},'
        f'"updated_at":{updated_at},"version":{version!r}}}'
    )


class _Stamps(dict[float, str]):
    """The JSON text of each time a batch's rows were written at, made once: one statement
    writes them all at one time, and the repr of a time (17 digits) cost 0.5 us a row.
    Times only: -0.0 would be written as 0.0 met first."""

    def __missing__(self, value: float) -> str:
        text = self[value] = repr(value)
        return text


def replace_notes(tx: Tx, items: Sequence[IntakeContext]) -> list[HandlerResult | None]:
    """``PUT /notes/{id}`` for many operations of one principal at once."""
    return _write_many(tx, items, "replace")


def patch_notes(tx: Tx, items: Sequence[IntakeContext]) -> list[HandlerResult | None]:
    """``PATCH /notes/{id}`` (a JSON merge patch) for many operations of one principal."""
    return _write_many(tx, items, "patch")


def delete_notes(tx: Tx, items: Sequence[IntakeContext]) -> list[HandlerResult | None]:
    """``DELETE /notes/{id}`` for many operations of one principal at once."""
    return _write_many(tx, items, "delete")


def _write_many(tx: Tx, items: Sequence[IntakeContext], kind: _Kind) -> list[HandlerResult | None]:
    """New versions of existing notes (``note_write`` for many, the notes locked first as
    ``note_lock`` locks one), their ledger rows, and each one's answer."""
    out: list[HandlerResult | None] = [None] * len(items)
    targets = _targets(items, kind == "delete")
    if not targets:
        return out
    principal, now = items[0].principal, items[0].now
    ids = json.dumps([note_id for _, note_id in targets])
    params = {"principal": principal, "ids": ids, "with_data": kind == "patch"}
    locked = ref.fetchall(tx, "notes_lock_many", params)
    current = {r["id"]: r for r in locked}
    planned = (_write(tx, i, items[i], current.get(n), kind) for i, n in targets)
    writes = [w for w in planned if w is not None]
    if not writes:
        return out
    seal = tx.cipher.seal
    notes = [
        [note_id, seal(data, *NOTE_AD, principal, note_id), int(gone), items[i].clock]
        for i, note_id, data, gone in writes
    ]
    params = {"principal": principal, "notes": json.dumps(notes), "now": now}
    made = {r["id"]: r for r in ref.fetchall(tx, "notes_write_many", params)}
    ledger: list[list[Any]] = []
    stamps = _Stamps()
    for i, note_id, data, _ in writes:
        row, ctx = made[note_id], items[i]
        version = int(row["version"])
        entity = ctx.entity or f"note:{note_id}"
        ledger.append(
            [ctx.idempotency_key, ctx.operation_id, entity, ctx.method, 200, version, ctx.clock]
        )
        if data is None:  # a delete, as delete_note answers
            out[i] = 200, {"id": note_id, "deleted": True, "version": version}
        else:
            location = "/notes/" + path_segment(note_id)
            body = _answer(note_id, version, data, ctx.clock, stamps[row["updated_at"]])
            out[i] = 200, body, {ETAG: quote_etag(str(version)), "Location": location}
    ref.execute_rows_later(tx, "ledger_append_many", ledger, principal=principal, now=now)
    return out


def _targets(items: Sequence[IntakeContext], deleting: bool) -> list[tuple[int, str]]:
    """(index, note id) of each item to write here: its id not named by an earlier item,
    and a replace's body a note of that id (validate_note's rules)."""
    seen: set[str] = set()
    targets: list[tuple[int, str]] = []
    for i, ctx in enumerate(items):
        note_id = str(ctx.path_params.get("id"))
        if note_id in seen:
            continue
        seen.add(note_id)
        if not deleting and not _names(ctx.body, note_id):
            continue
        targets.append((i, note_id))
    return targets


def _names(body: Any, note_id: str) -> bool:
    """Is ``body`` a note whose id, if it gives one, is ``note_id``?"""
    if not isinstance(body, dict):
        return False
    given = body.get("id")
    if given in (None, ""):
        return True
    try:
        return resource_id(given) == note_id
    except InvalidIdentifier:
        return False


def _write(tx: Tx, i: int, ctx: IntakeContext, row: Any, kind: _Kind) -> _Write | None:
    """The write ``ctx`` asks of the note ``row`` (as locked), or None where the one-note
    handler answers otherwise: no live note (404), a version If-Match does not name (412)."""
    if row is None or row["deleted"]:
        return None
    if not if_match_allows(ctx.if_match, row):
        return None
    note_id = row["id"]
    if kind == "delete":  # the stored bytes kept, as delete_note keeps them
        return i, note_id, None, True
    if kind == "replace":
        return i, note_id, _data_text(ctx), False
    given = {k: v for k, v in ctx.body.items() if k != "id"}
    kept = json.loads(tx.cipher.open(row["data"], *NOTE_AD, row["principal"], note_id))
    return i, note_id, canonical_json(merge_patch(kept, given)), False
