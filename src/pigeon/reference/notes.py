"""The reference application: versioned notes behind the idempotent intake.

Every write appends one row to the effect ledger inside the intake's transaction, so the
ledger holds exactly the effects that committed: a duplicate there is a double effect.
Notes are scoped by principal, like the keys that write them. Versions are integers sent
as ETags (``"3"``); ``If-Match`` with another version gets 412 and the current note, its
version and the clock of the write that made it: the client resolves the conflict.

Beside ``/notes`` the app can serve collections whose conflicts the server settles itself,
one strategy per entity type, e.g. ``/lww-notes`` (last write wins by hybrid logical clock,
`pigeon.reference.lww`) and ``/docs`` (CRDT documents, `pigeon.reference.crdt`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette

from pigeon.core.wire import ETAG, PROBLEM_JSON, canonical_json, quote_etag
from pigeon.edge.merge import merge_patch
from pigeon.exceptions import ValidationError
from pigeon.reference import schema as ref
from pigeon.reference.answers import add_answers
from pigeon.reference.conflicts import (
    DEFAULT_MAX_SKEW,
    BoundedClock,
    DeviceClockMiddleware,
)
from pigeon.reference.jobs import app as demo_jobs
from pigeon.reference.lww import LwwCollection
from pigeon.reference.notes_many import create_notes, delete_notes, patch_notes, replace_notes
from pigeon.reference.notes_reads import (
    NOTE_AD,
    NotesReads,
    if_match_allows,
    note_json,
    note_row,
    opened,
)
from pigeon.server import contract
from pigeon.server.access import OperatorCheck
from pigeon.server.app import create_app
from pigeon.server.auth import Authenticator
from pigeon.server.identifiers import InvalidIdentifier, path_segment, resource_id
from pigeon.server.intake import HandlerResult, Intake, IntakeContext
from pigeon.server.options import ServerOptions
from pigeon.server.problems import problem
from pigeon.server.replay import ReplayInfo
from pigeon.storage.base import Database, Row, Tx

REFERENCE_LWW = ("lww-notes",)  # last-write-wins by hybrid logical clock
REFERENCE_CRDT = ("docs",)  # Yjs documents merged on the server


# A note is any JSON object; "id", if given, names it (a string or a number, as the path;
# "" is no id). At /notes/{id} the body's id, when given, is the path's (x-pigeon-path-id).
NOTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"anyOf": [contract.RESOURCE_ID, contract.INTEGER_ID, {"const": ""}]},
    },
    "additionalProperties": True,
}
NOTE_AT_ID_SCHEMA: dict[str, Any] = NOTE_SCHEMA | {"x-pigeon-path-id": "id"}


def _not_found(note_id: str) -> HandlerResult:
    body = problem(404, "no-such-note", "Not found", f"no note {note_id!r}")
    return 404, body, {"content-type": PROBLEM_JSON}


def validate_note(body: Any, path_params: Mapping[str, Any]) -> None:
    """What ``NOTE_SCHEMA`` cannot say, checked with it before the claim: the body's id
    and the path's must agree, and an id must fit the store."""
    if not isinstance(body, dict):
        raise ValidationError("a note is a JSON object", slug="bad-note")
    body_id, path_id = body.get("id"), path_params.get("id")
    # Each id from the documented alphabet (pigeon.server.identifiers): never stringified.
    named = None if body_id in (None, "") else _note_id(body_id, "body.id")
    if path_id not in (None, ""):
        _note_id(path_id, "id")
    if path_id is not None and named is not None and named != str(path_id):
        raise ValidationError(
            f"the body names note {body_id!r} but the path names {path_id!r}", slug="bad-note"
        )


def _note_id(value: object, what: str) -> str:
    try:
        return resource_id(value, what)
    except InvalidIdentifier as exc:
        raise ValidationError(str(exc), slug="bad-note") from None


def _data(ctx: IntakeContext, note_id: str | None) -> dict[str, Any]:
    # Declared checks ran before the claim; run again here for a handler registered
    # without them (a ValidationError from a handler still frees the key).
    validate_note(ctx.body, {} if note_id is None else {"id": note_id})
    assert isinstance(ctx.body, dict)
    return {k: v for k, v in ctx.body.items() if k != "id"}


def _locked(ctx: IntakeContext, note_id: str) -> Row | None:
    """The live note ``note_id``, its data as stored (sealed). Locked (note_lock): the
    check (If-Match) and the write it allows are one step for other writers of the note,
    or two of them could both pass it against one version."""
    row = ref.fetchone(ctx.tx, "note_lock", {"principal": ctx.principal, "id": note_id})
    return row if row is not None and not row["deleted"] else None


def _mismatch(row: Row) -> HandlerResult:
    """The 412 of an ``If-Match`` that names another version than ``row``'s (opened)."""
    return 412, note_json(row), {ETAG: quote_etag(str(row["version"]))}


def _params(
    ctx: IntakeContext, note_id: str, data: dict[str, Any] | None, deleted: bool
) -> dict[str, Any]:
    text = None if data is None else canonical_json(data)
    return {
        "principal": ctx.principal,
        "id": note_id,
        "data": ctx.tx.cipher.seal(text, *NOTE_AD, ctx.principal, note_id),
        "deleted": int(deleted),
        "clock": ctx.clock,
        "now": ctx.now,
    }


def _ledger_params(ctx: IntakeContext, note_id: str, status: int) -> dict[str, Any]:
    return {
        "idempotency_key": ctx.idempotency_key,
        "principal": ctx.principal,
        "operation_id": ctx.operation_id,
        "entity": ctx.entity or f"note:{note_id}",
        "method": ctx.method,
        "status": status,
        "clock": ctx.clock,
        "now": ctx.now,
    }


def _ledger(ctx: IntakeContext, note_id: str, status: int, version: int) -> None:
    params = _ledger_params(ctx, note_id, status) | {"version": version}
    ref.execute(ctx.tx, "ledger_append", params)


def _answer(row: Row, status: int) -> HandlerResult:
    # The id as one path segment: '€uro' is /notes/%E2%82%ACuro, 'a?b' is /notes/a%3Fb.
    location = "/notes/" + path_segment(row["id"])
    headers = {ETAG: quote_etag(str(row["version"])), "Location": location}
    return status, note_json(row), headers


def _created(ctx: IntakeContext, note_id: str, data: dict[str, Any]) -> HandlerResult | None:
    """The 201 of a note made now, its ledger row written; None if a live note has the id."""
    params = _params(ctx, note_id, data, False)
    if ref.has(ctx.tx, "note_create_logged"):  # both in one statement: one round trip
        params |= _ledger_params(ctx, note_id, 201)
        created = note_row(ctx.tx, "note_create_logged", params)
    else:
        created = note_row(ctx.tx, "note_create", params)
        if created is not None:
            _ledger(ctx, note_id, 201, int(created["version"]))
    return None if created is None else _answer(created, 201)


def create_note(ctx: IntakeContext) -> HandlerResult:
    data = _data(ctx, None)
    raw_id = ctx.body.get("id")
    note_id = resource_id(raw_id) if raw_id not in (None, "") else uuid.uuid4().hex
    created = _created(ctx, note_id, data)
    if created is not None:
        return created
    existing = _locked(ctx, note_id)
    body = problem(409, "version-conflict", "Conflict", f"note {note_id!r} already exists")
    current = {} if existing is None else {"current": note_json(opened(ctx.tx, existing))}
    return 409, body | current, {"content-type": PROBLEM_JSON}


def _checked_write(
    ctx: IntakeContext, note_id: str, data: dict[str, Any] | None, *, deleted: bool = False
) -> Row | HandlerResult:
    """A new version of the live note ``note_id`` with ``data`` (None: its stored bytes,
    neither opened nor sealed again), its ledger row written, if ``If-Match`` allows it;
    else the 404 or 412 to answer. The row written comes back with its data as stored."""
    if ref.has(ctx.tx, "note_write_logged"):  # lock, check, write, ledger: one round trip
        params = _logged_params(ctx, note_id, data, deleted) | {"if_match": ctx.if_match}
        row = ref.fetchone(ctx.tx, "note_write_logged", params)
        if row is None:
            return _not_found(note_id)
        return row if row.pop("written") else _mismatch(opened(ctx.tx, row))
    row = _locked(ctx, note_id)
    if row is None:
        return _not_found(note_id)
    if not if_match_allows(ctx.if_match, row):
        return _mismatch(opened(ctx.tx, row))
    return _write_logged(ctx, row, data, deleted=deleted)


def _logged_params(
    ctx: IntakeContext, note_id: str, data: dict[str, Any] | None, deleted: bool
) -> dict[str, Any]:
    params = _params(ctx, note_id, data, deleted) | _ledger_params(ctx, note_id, 200)
    return params | {"if_match": None}


def _write_logged(
    ctx: IntakeContext, current: Row, data: dict[str, Any] | None, *, deleted: bool = False
) -> Row:
    """A new version of ``current`` (locked, its checks passed) with ``data`` (None: its
    stored bytes) and its ledger row; the row written, its data as stored."""
    note_id = current["id"]
    row = ref.fetchone(ctx.tx, "note_write", _params(ctx, note_id, data, deleted))
    assert row is not None
    _ledger(ctx, note_id, 200, int(row["version"]))
    return row


def replace_note(ctx: IntakeContext) -> HandlerResult:
    note_id = str(ctx.path_params["id"])
    written = _checked_write(ctx, note_id, _data(ctx, note_id))
    return _answer(opened(ctx.tx, written), 200) if isinstance(written, dict) else written


def patch_note(ctx: IntakeContext) -> HandlerResult:
    note_id = str(ctx.path_params["id"])
    patch = _data(ctx, note_id)
    # The merge needs the current data in Python (sealed at rest, SQL cannot merge it):
    # read and locked first, then written with the answer.
    row = _locked(ctx, note_id)
    if row is None:
        return _not_found(note_id)
    row = opened(ctx.tx, row)
    if not if_match_allows(ctx.if_match, row):
        return _mismatch(row)
    merged = merge_patch(json.loads(row["data"]), patch)
    if ref.has(ctx.tx, "note_write_logged"):
        return _answer(_write_later(ctx, row, merged), 200)
    return _answer(opened(ctx.tx, _write_logged(ctx, row, merged)), 200)


def _write_later(ctx: IntakeContext, current: Row, data: dict[str, Any]) -> Row:
    """The next version of ``current`` (locked here, its checks passed) with its ledger
    row, sent with the transaction's next round trip (the answer's and the COMMIT's):
    the row it makes, returned now, is known, as no other writer can touch it."""
    params = _logged_params(ctx, current["id"], data, False)
    ref.execute_later(ctx.tx, "note_write_logged", params)
    written = {"version": int(current["version"]) + 1, "data": canonical_json(data)}
    return current | written | {"deleted": 0, "clock": ctx.clock, "updated_at": float(ctx.now)}


def delete_note(ctx: IntakeContext) -> HandlerResult:
    note_id = str(ctx.path_params["id"])
    # Its data stays as stored (sealed to the note's principal and id), never opened here.
    written = _checked_write(ctx, note_id, None, deleted=True)
    if not isinstance(written, dict):
        return written
    return 200, {"id": note_id, "deleted": True, "version": int(written["version"])}


def current_note(tx: Tx, stored: Any, info: ReplayInfo) -> Any:
    """Replay hook of the notes' writes: a conflict (412, 409) answered "already applied"
    once its stored body is purged carries the note as it is now, which the client's
    resolver merges against (see ``pigeon.server.replay``). A replay of a stored answer
    stays verbatim: its body and ETag agree. A write that took effect gets nothing: the
    note's current state is not what this client wrote, and must not become the base of
    its next merge."""
    if info.response_kept or info.status not in (409, 412):
        return None
    note_id = info.path_params.get("id")
    if note_id is None and isinstance(info.body, dict):
        note_id = info.body.get("id")
    if note_id in (None, ""):
        return None
    row = note_row(tx, "note_get", {"principal": info.principal, "id": str(note_id)})
    return None if row is None or row["deleted"] else note_json(row)


def create_notes_app(
    db: Database,
    options: ServerOptions | None = None,
    *,
    now: Callable[[], float] = time.time,
    authenticate: Authenticator | None = None,
    operator: OperatorCheck | None = None,
    after_commit: Callable[[list[str]], None] | None = None,
    purge_interval: float | None = 3600.0,
    lww_collections: Sequence[str] = (),
    crdt_collections: Sequence[str] = (),
    max_skew: float = DEFAULT_MAX_SKEW,
) -> Starlette:
    """The notes app. ``options``: the server's settings (`ServerOptions`: the intake's,
    the body limits, who may call what, the operations page's sessions); ``authenticate``
    / ``operator``: see `create_app`; ``after_commit``: see `Intake`.
    ``lww_collections`` / ``crdt_collections`` name collections the server settles itself
    (e.g. ``("lww-notes",)`` and ``("docs",)``), each served at ``/<name>`` and
    ``/<name>/{id}``; ``max_skew``: seconds a device's clock stamp may run ahead of the
    server's clock before it is no longer believed (`pigeon.reference.conflicts`).
    Notes, resources and conflict outcomes are the caller's own (``user`` routes); a record
    its creator's or an operator's; the ledger, the dashboard and ``/metrics`` the
    operator's alone (`pigeon.server.access`). Creates or upgrades the app's own tables in
    ``db`` (`pigeon.reference.schema`)."""
    options = options or ServerOptions()
    # The app's own tables (its schema component): made or upgraded here, not by the
    # server's migrations, so a database without this app has none of them.
    ref.attach(db)
    clock = BoundedClock("server", wall=lambda: int(now() * 1000), max_skew_ms=int(max_skew * 1000))
    intake = Intake(db, options.intake, now=now, clock=clock, after_commit=after_commit)
    collections = (*lww_collections, *crdt_collections)
    add_note_writes(intake)
    add_settled_collections(intake, lww_collections, crdt_collections, max_skew)
    app = create_app(
        intake,
        options,
        routes=NotesReads(db, options.sessions).routes(collections),
        authenticate=authenticate,
        operator=operator,
        purge_interval=purge_interval,
        title="pigeon notes",
    )
    app.state.db = db
    app.add_middleware(DeviceClockMiddleware)
    return app


def reference_app(options: ServerOptions) -> Starlette:
    """What ``pigeon serve`` serves without ``--app``: the notes app on the database of
    ``options``, with every conflict strategy the server settles itself (last write wins
    at ``/lww-notes``, CRDT documents at ``/docs``)."""
    return create_notes_app(
        options.open_db(), options, lww_collections=REFERENCE_LWW, crdt_collections=REFERENCE_CRDT
    )


def add_note_writes(intake: Intake) -> None:
    """The writes of ``/notes``: create, replace, patch (each schema-checked before the
    claim) and delete, each answering a purged conflict's replay with the note now; a
    batch's creates, replaces and deletes are made many at once
    (`pigeon.reference.notes_many`)."""
    for method, path, handler, schema, many in (
        ("POST", "/notes", create_note, NOTE_SCHEMA, create_notes),
        ("PUT", "/notes/{id}", replace_note, NOTE_AT_ID_SCHEMA, replace_notes),
        ("PATCH", "/notes/{id}", patch_note, NOTE_AT_ID_SCHEMA, patch_notes),
    ):
        intake.add_operation(
            method,
            path,
            handler,
            on_replay=current_note,
            request_schema=schema,
            validate=validate_note,
            many=many,
        )
    intake.add_operation(
        "DELETE", "/notes/{id}", delete_note, on_replay=current_note, many=delete_notes
    )


def add_settled_collections(
    intake: Intake, lww: Sequence[str], crdt: Sequence[str], max_skew: float
) -> None:
    """The collections whose conflicts the server settles (last write wins, CRDT), and
    the accountable resource /answers: records, obligations, jobs (202), checked against
    the tasks of the app `pigeon worker` runs by default and with their retry policies."""
    for name in lww:
        LwwCollection(name, max_skew=max_skew).register(intake)
    for name in crdt:
        from pigeon.reference.crdt import CrdtCollection  # pycrdt: only when asked for

        CrdtCollection(name, max_skew=max_skew).register(intake)
    add_answers(intake, demo_jobs)
