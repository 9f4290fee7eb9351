"""The notes contract with Django models: each write is one ``@idempotent`` view whose
ORM writes, ledger row and job commit with its stored answer."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from notes.auth import PROBLEM, is_operator
from notes.models import Effect, Note
from pigeon.core.clock import HybridLogicalClock
from pigeon.edge.merge import merge_patch
from pigeon.exceptions import ValidationError
from pigeon.integrations.django import defer, idempotent
from pigeon.server.identifiers import id_problem, path_segment, resource_id

CLOCK = HybridLogicalClock("server")


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JsonResponse:
    body = {"type": f"urn:pigeon:problem:{slug}", "title": title, "status": status}
    return JsonResponse(body | {"detail": detail} | extra, status=status, content_type=PROBLEM)


def note_data(request: Any, path_id: str | None) -> tuple[dict[str, Any], Any]:
    """The note's fields and the body's id; ``ValidationError`` (the key stays free)."""
    body = json.loads(request.body) if request.body else None
    if not isinstance(body, dict):
        raise ValidationError("a note is a JSON object", slug="bad-note")
    body_id = body.get("id")
    for note_id, what in ((body_id, "body.id"), (path_id, "id")):
        refused = None if note_id in (None, "") else id_problem(note_id, what)
        if refused is not None:
            raise ValidationError(refused, slug="bad-note")
    if path_id is not None and body_id not in (None, "") and resource_id(body_id) != path_id:
        raise ValidationError(
            f"the body names note {body_id!r} but the path names {path_id!r}", slug="bad-note"
        )
    return {k: v for k, v in body.items() if k != "id"}, body_id


def applied(request: Any, note: Note, status: int) -> HttpResponse:
    """The write's ledger row, and its answer."""
    Effect.objects.create(
        idempotency_key=request.headers["Idempotency-Key"].strip('"'),
        principal=note.principal,
        operation_id=request.headers.get("X-Pigeon-Operation-Id")
        or request.headers["Idempotency-Key"].strip('"'),
        entity=f"note:{note.note_id}",
        method=request.method,
        status=status,
        version=note.version,
        clock=note.clock,
        applied_at=time.time(),
    )
    response = JsonResponse(note.as_json(), status=status)
    response["ETag"] = f'"{note.version}"'
    response["Location"] = "/notes/" + path_segment(note.note_id)
    return response


def clock_of(request: Any) -> str:
    return request.headers.get("X-Pigeon-Clock") or CLOCK.now().encode()


@csrf_exempt
@idempotent
def notes(request: Any) -> HttpResponse:
    if request.method == "GET":
        found = Note.objects.filter(principal=request.principal, deleted=False).order_by("note_id")
        return JsonResponse({"notes": [n.as_json() for n in found]})
    if request.method != "POST":
        return problem(405, "method-not-allowed", "Method not allowed", "GET or POST")
    data, body_id = note_data(request, None)
    note_id = resource_id(body_id) if body_id not in (None, "") else uuid.uuid4().hex
    note = Note.objects.select_for_update().filter(principal=request.principal, note_id=note_id)
    existing = note.first()
    if existing is not None and not existing.deleted:
        return problem(
            409, "version-conflict", "Conflict", f"note {note_id!r} already exists",
            current=existing.as_json(),
        )  # fmt: skip
    now, clock = time.time(), clock_of(request)
    if existing is not None:  # a new life for a deleted note: its version goes on
        existing.version, existing.data, existing.deleted = existing.version + 1, data, False
        existing.clock, existing.updated_at = clock, now
        existing.save()
        return applied(request, existing, 201)
    try:
        with transaction.atomic():  # two creates of one new id meet at the unique key
            created = Note.objects.create(
                principal=request.principal, note_id=note_id, data=data, clock=clock, updated_at=now
            )
    except IntegrityError:
        return problem(409, "version-conflict", "Conflict", f"note {note_id!r} already exists")
    defer(
        queue="notes",
        task="index_note",
        payload={"principal": created.principal, "note_id": note_id},
    )
    return applied(request, created, 201)


@csrf_exempt
@idempotent
def note(request: Any, note_id: str) -> HttpResponse:
    if request.method == "GET":
        found = Note.objects.filter(principal=request.principal, note_id=note_id, deleted=False)
        row = found.first()
        if row is None:
            return problem(404, "no-such-note", "Not found", f"no note {note_id!r}")
        response = JsonResponse(row.as_json())
        response["ETag"] = f'"{row.version}"'
        return response
    if request.method not in ("PUT", "PATCH", "DELETE"):
        return problem(405, "method-not-allowed", "Method not allowed", "GET, PUT, PATCH, DELETE")
    data = note_data(request, note_id)[0] if request.method != "DELETE" else {}
    row = (
        Note.objects.select_for_update()
        .filter(principal=request.principal, note_id=note_id, deleted=False)
        .first()
    )
    if row is None:
        return problem(404, "no-such-note", "Not found", f"no note {note_id!r}")
    if_match = request.headers.get("If-Match")
    if if_match is not None and if_match.strip('"') not in ("*", str(row.version)):
        response = JsonResponse(row.as_json(), status=412)
        response["ETag"] = f'"{row.version}"'
        return response
    row.version += 1
    row.clock, row.updated_at = clock_of(request), time.time()
    if request.method == "DELETE":
        row.deleted = True
        row.save()
        applied(request, row, 200)
        return JsonResponse({"id": note_id, "deleted": True, "version": row.version})
    row.data = merge_patch(row.data, data) if request.method == "PATCH" else data
    row.save()
    return applied(request, row, 200)


def ledger(request: Any) -> HttpResponse:
    """Every write that took effect, in commit order (the operator's)."""
    if not is_operator(request):
        return problem(404, "no-such-route", "Not found", f"no route GET {request.path}")
    after = int(request.GET.get("after", "0"))
    limit = int(request.GET.get("limit", "100000"))
    rows = Effect.objects.filter(seq__gt=after).order_by("seq")[:limit].values()
    return JsonResponse({"entries": list(rows)})


def health(request: Any) -> HttpResponse:
    return JsonResponse({"status": "ok"})
