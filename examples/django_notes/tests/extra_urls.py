"""The example's URLs and, for its tests, views that fail in each way the rules name, and
a Django REST framework view under ``@idempotent_action``."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from django.db import IntegrityError
from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from notes.models import Note
from notes_project.urls import urlpatterns as notes_urls
from pigeon.integrations.django import defer, idempotent, idempotent_action


def _note(request: Any, note_id: str) -> Note:
    return Note.objects.create(
        principal=request.principal, note_id=note_id, clock="c", updated_at=time.time()
    )


@csrf_exempt
@idempotent
def unavailable(request: Any) -> HttpResponse:
    _note(request, "written-then-503")
    defer(queue="notes", task="index_note", payload={"principal": "x", "note_id": "y"})
    return JsonResponse({"detail": "try later"}, status=503)


@csrf_exempt
@idempotent
def raises(request: Any) -> HttpResponse:
    _note(request, "written-then-raised")
    raise ValueError("a secret the answer must not quote")


@csrf_exempt
@idempotent
def swallows(request: Any) -> HttpResponse:
    _note(request, "dup")
    with contextlib.suppress(IntegrityError):
        _note(request, "dup")  # the unique key refuses it; the transaction is spoilt
    return JsonResponse({}, status=201)


class NoteIn(serializers.Serializer):
    note_id = serializers.CharField(max_length=20)


class DrfNotes(APIView):
    permission_classes = (AllowAny,)

    @idempotent_action
    def post(self, request: Any) -> Response:
        given = NoteIn(data=request.data)
        given.is_valid(raise_exception=True)
        note = _note(request, given.validated_data["note_id"])
        return Response({"id": note.note_id}, status=201)


urlpatterns = [
    *notes_urls,
    path("unavailable", unavailable),
    path("raises", raises),
    path("swallows", swallows),
    path("drf/notes", DrfNotes.as_view()),
]
