"""CRDT documents: the payload is a Yjs update, the server merges it into its copy.

``PATCH /<collection>/{id}`` (or ``POST /<collection>`` with an ``id``) carries
``{"update": "<base64 Yjs update>"}``. PATCH, not PUT: an update adds to the document,
it does not replace it, and the edge queue folds an unsent PUT into the next one to the
same resource (the later replaces the earlier), which would drop every offline update
but the last. Two PATCHes are never folded, so each update arrives.

The server applies the update to the stored document and stores the merged state; the
answer (and ``GET``) holds ``{"state": "<base64>"}``, the whole merged document, which
the client applies to its replica. Yjs updates commute and
are idempotent, so replicas converge whatever the order and duplication of delivery:
there is nothing to conflict, and every write is recorded as ``merged``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from pigeon.core.wire import ETAG, quote_etag
from pigeon.exceptions import InvalidOperation, MissingExtra, ValidationError
from pigeon.reference import conflicts as cf
from pigeon.server import contract
from pigeon.server import identifiers as ids
from pigeon.server.intake import HandlerResult, Intake, IntakeContext

try:
    from pycrdt import Doc, merge_updates
except ImportError as exc:
    raise MissingExtra("CRDT documents need the 'crdt' extra: pip install 'pigeon[crdt]'") from exc


def encode(update: bytes) -> str:
    return base64.b64encode(update).decode("ascii")


def decode(text: Any) -> bytes:
    """A base64 Yjs update; raises InvalidOperation naming what is wrong with it."""
    if not isinstance(text, str) or not text:
        raise InvalidOperation(f"a CRDT update is a non-empty base64 string, not {text!r}")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise InvalidOperation(f"the CRDT update is not base64: {exc}") from exc


def merge(*updates: bytes) -> bytes:
    """One update holding every given update (pure). Order and repeats do not matter.

    Merged at the encoding level, not by applying to a document and re-encoding: an update
    that arrives before one it depends on is kept as it is, not dropped as "pending".
    """
    for update in updates:
        try:
            Doc().apply_update(update)  # decodes it: garbage is refused here, at the door
        except ValueError as exc:
            raise InvalidOperation(f"not a Yjs update: {exc}") from exc
    return bytes(merge_updates(*updates)) if len(updates) > 1 else bytes(updates[0])


class CrdtCollection:
    """The handlers of one collection of CRDT documents, registered on an intake."""

    def __init__(self, name: str = "docs", *, max_skew: float = cf.DEFAULT_MAX_SKEW) -> None:
        self.name = name
        self.max_skew_ms = int(max_skew * 1000)

    def register(self, intake: Intake) -> None:
        for method, path, handler, schema in (
            ("POST", f"/{self.name}", self.create, CREATE_SCHEMA),
            ("PATCH", f"/{self.name}/{{id}}", self.update, UPDATE_SCHEMA),
        ):
            intake.add_operation(
                method, path, handler, request_schema=schema, validate=validate_update
            )

    def create(self, ctx: IntakeContext) -> HandlerResult:
        validate_update(ctx.body, ctx.path_params)
        return self._merge(ctx, ids.resource_id(ctx.body["id"]))

    def update(self, ctx: IntakeContext) -> HandlerResult:
        return self._merge(ctx, str(ctx.path_params["id"]))

    def _merge(self, ctx: IntakeContext, doc_id: str) -> HandlerResult:
        validate_update(ctx.body, {"id": doc_id})
        update = decode(ctx.body["update"])
        # Twice at most: a first write that another writer beat to the insert (two devices, one
        # new document, at once) merges into the document that writer created.
        settled = self._apply(ctx, doc_id, update)
        if settled is None:
            settled = self._apply(ctx, doc_id, update)
        assert settled is not None, "the document exists, it cannot be created twice"
        return settled

    def _apply(self, ctx: IntakeContext, doc_id: str, update: bytes) -> HandlerResult | None:
        row = cf.load(ctx, self.name, doc_id)
        try:
            stored = b"" if row is None else decode(json.loads(row["data"])["state"])
            state = merge(stored, update) if stored else merge(update)
        except InvalidOperation as exc:
            raise _bad(str(exc)) from exc
        stamped = cf.Stamped.of(ctx, self.max_skew_ms)
        if row is not None and state == stored:
            # Already holds this update (a duplicate made under another key): no new version.
            cf.record(ctx, row, "merged", stamped, ctx.body, row["clock"])
            cf.ledger(ctx, row, 200)
            return _answer(row, 200)
        # The document's clock is the greatest stamp merged into it.
        if row is not None and not stamped.supersedes(cf.Stamped.stored(row)):
            stamped = cf.Stamped.stored(row)
        other = None if row is None else row["clock"]
        written = cf.store(ctx, self.name, doc_id, {"state": encode(state)}, stamped)
        if written is None:
            return None
        if other is not None:
            merged = cf.Stamped.of(ctx, self.max_skew_ms)
            cf.record(ctx, written, "merged", merged, ctx.body, other)
        cf.ledger(ctx, written, 200 if other else 201)
        return _answer(written, 200 if other else 201)


def _bad(detail: str) -> ValidationError:
    return ValidationError(detail, slug="bad-update")


# The update's format, "yjs-update", is what no pattern can say (`decode` and `merge`
# check it): the base64 of a Yjs update.
_UPDATE = {"type": "string", "format": "yjs-update", "description": "a Yjs update, base64"}
UPDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["update"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": ["string", "integer"], "description": "unread: the path names it"},
        "update": _UPDATE,
    },
}
CREATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "update"],
    "additionalProperties": False,
    "properties": {"id": {"anyOf": [contract.RESOURCE_ID, contract.INTEGER_ID]}, "update": _UPDATE},
}


def validate_update(body: Any, path_params: Mapping[str, Any]) -> None:
    """Before the claim (and again in the handlers): a document named by an id that fits
    the store, and an update that decodes as one (``decode``)."""
    if not isinstance(body, dict):
        raise _bad('a document write is {"update": "<base64 Yjs update>"}')
    doc_id = path_params.get("id", body.get("id"))
    if doc_id in (None, ""):
        raise _bad('a new document is {"id": ..., "update": "<base64 Yjs update>"}')
    refused = ids.id_problem(doc_id)
    if refused is not None:
        raise _bad(refused)
    try:
        merge(decode(body.get("update")))  # a Yjs update, not just any base64
    except InvalidOperation as exc:
        raise _bad(str(exc)) from exc


def _answer(row: dict[str, Any], status: int) -> HandlerResult:
    current = cf.resource_json(row)
    body = {"outcome": "merged", "current": current, "state": current["data"]["state"]}
    return status, body, {ETAG: quote_etag(str(row["version"]))}
