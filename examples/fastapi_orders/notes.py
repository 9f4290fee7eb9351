"""The reference app's notes contract, with SQLAlchemy models: create, replace, merge
patch, delete (a tombstone), ``If-Match`` against the version, and reads."""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from examples.fastapi_orders.models import Note, NoteEffect
from examples.fastapi_orders.state import current_user, pigeon, session
from pigeon.core.clock import HybridLogicalClock
from pigeon.core.wire import PROBLEM_JSON, quote_etag
from pigeon.edge.merge import merge_patch
from pigeon.server.identifiers import id_problem, resource_id
from pigeon.server.operations import OperationRequest

router = APIRouter()
clock = HybridLogicalClock("orders-app")
User = Annotated[str, Depends(current_user)]
Db = Annotated[Session, Depends(session)]
# The request as pigeon read it: its key, If-Match and clock stamp, checked by its rules.
Op = Annotated[OperationRequest, Depends(pigeon.operation)]


def _problem(status: int, slug: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": f"urn:example:{slug}", "title": slug, "status": status, "detail": detail}
    return JSONResponse(body | extra, status_code=status, media_type=PROBLEM_JSON)


def note_json(note: Note) -> dict[str, Any]:
    return {
        "id": note.id,
        "version": note.version,
        "data": json.loads(note.data),
        "clock": note.clock,
        "updated_at": note.updated_at,
    }


def _answer(note: Note, status: int) -> JSONResponse:
    headers = {"ETag": quote_etag(str(note.version)), "Location": f"/notes/{note.id}"}
    return JSONResponse(note_json(note), status_code=status, headers=headers)


def _checked(body: Any, path_id: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """A note's id (from the body or the path) and data; 400 before any claim."""
    if not isinstance(body, dict):
        raise HTTPException(400, "a note is a JSON object")
    body_id = body.get("id")
    # The reference app's rule: a string or an integer (42.0 is 42), never a bool.
    refused = None if body_id in (None, "") else id_problem(body_id, "body.id")
    if refused is not None:
        raise HTTPException(400, refused)
    named = None if body_id in (None, "") else resource_id(body_id)
    if path_id is not None and named is not None and named != path_id:
        raise HTTPException(400, f"the body names note {body_id!r} but the path {path_id!r}")
    note_id = path_id if path_id is not None else named
    return note_id, {k: v for k, v in body.items() if k != "id"}


def new_note(body: Annotated[Any, Body()]) -> tuple[str | None, dict[str, Any]]:
    return _checked(body)


def note_at(note_id: str, body: Annotated[Any, Body()]) -> tuple[str | None, dict[str, Any]]:
    return _checked(body, note_id)


NewNote = Annotated[tuple[str | None, dict[str, Any]], Depends(new_note)]
NoteAt = Annotated[tuple[str | None, dict[str, Any]], Depends(note_at)]


def _write(db: Db, note: Note, data: dict[str, Any], op: OperationRequest) -> None:
    """A new version of ``note``, and its line in the ledger of effects."""
    note.version += 1
    note.data = json.dumps(data)
    note.clock = op.clock or clock.now().encode()
    note.updated_at = time.time()
    effect = NoteEffect(
        idempotency_key=op.key,
        principal=note.principal,
        note_id=note.id,
        method=op.method,
        version=note.version,
        body=note.data,
    )
    db.add(effect)
    db.flush()


def _live(db: Db, user: str, note_id: str) -> Note | None:
    # FOR UPDATE: the If-Match check and the write it allows are one step for writers.
    note = db.scalar(
        select(Note).where(Note.principal == user, Note.id == note_id).with_for_update()
    )
    return None if note is None or note.deleted else note


def _precondition(note: Note, op: OperationRequest) -> JSONResponse | None:
    if op.if_match is None or op.if_match in ("*", str(note.version)):
        return None
    return JSONResponse(
        note_json(note), status_code=412, headers={"ETag": quote_etag(str(note.version))}
    )


@router.post("/notes", status_code=201)
@pigeon.idempotent
def create_note(note: NewNote, db: Db, user: User, op: Op) -> Any:
    note_id, data = note
    note_id = note_id or uuid.uuid4().hex
    existing = db.scalar(
        select(Note).where(Note.principal == user, Note.id == note_id).with_for_update()
    )
    if existing is not None and not existing.deleted:
        return _problem(
            409, "version-conflict", f"note {note_id!r} already exists", current=note_json(existing)
        )
    row = existing or Note(
        principal=user, id=note_id, version=0, data="{}", clock="", updated_at=0.0
    )
    row.deleted = False
    db.add(row)
    _write(db, row, data, op)
    return _answer(row, 201)


@router.put("/notes/{note_id}")
@pigeon.idempotent
def replace_note(
    note_id: str,
    note: NoteAt,
    db: Db,
    user: User,
    op: Op,
) -> Any:
    row = _live(db, user, note_id)
    if row is None:
        return _problem(404, "no-such-note", f"no note {note_id!r}")
    failed = _precondition(row, op)
    if failed is not None:
        return failed
    _write(db, row, note[1], op)
    return _answer(row, 200)


@router.patch("/notes/{note_id}")
@pigeon.idempotent
def patch_note(
    note_id: str,
    note: NoteAt,
    db: Db,
    user: User,
    op: Op,
) -> Any:
    row = _live(db, user, note_id)
    if row is None:
        return _problem(404, "no-such-note", f"no note {note_id!r}")
    failed = _precondition(row, op)
    if failed is not None:
        return failed
    _write(db, row, merge_patch(json.loads(row.data), note[1]), op)
    return _answer(row, 200)


@router.delete("/notes/{note_id}")
@pigeon.idempotent
def delete_note(note_id: str, db: Db, user: User, op: Op) -> Any:
    row = _live(db, user, note_id)
    if row is None:
        return _problem(404, "no-such-note", f"no note {note_id!r}")
    failed = _precondition(row, op)
    if failed is not None:
        return failed
    row.deleted = True
    _write(db, row, json.loads(row.data), op)
    return {"id": note_id, "deleted": True, "version": row.version}


@router.get("/notes")
def list_notes(db: Db, user: User) -> dict[str, Any]:
    rows = db.scalars(
        select(Note).where(Note.principal == user, Note.deleted.is_(False)).order_by(Note.id)
    )
    return {"notes": [note_json(row) for row in rows]}


@router.get("/notes/{note_id}")
def get_note(note_id: str, db: Db, user: User) -> Any:
    row = db.get(Note, (user, note_id))
    if row is None or row.deleted:
        return _problem(404, "no-such-note", f"no note {note_id!r}")
    return _answer(row, 200)
