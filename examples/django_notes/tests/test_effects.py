"""``pigeon.integrations.django.orm_effect``: ORM writes claimed by a key in their own
transaction, once per key; the index task of the example writes through it."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from notes.jobs import index_note
from notes.models import Note
from pigeon.integrations.django import orm_effect

pytestmark = pytest.mark.django_db(transaction=True)


def note(note_id: str) -> Note:
    return Note.objects.create(principal="ada", note_id=note_id, clock="c", updated_at=1.0)


def effects() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pigeon_effects")
        return int(cursor.fetchone()[0])


def test_a_key_writes_once_and_answers_its_first_result_after() -> None:
    note("n1")
    bumps: list[int] = []

    def bump() -> int:
        bumps.append(1)
        return Note.objects.filter(note_id="n1").update(version=len(bumps) + 1)

    assert orm_effect("test", "n1", bump) == 1
    assert orm_effect("test", "n1", bump) == 1  # the stored result: bump did not run again
    assert bumps == [1] and Note.objects.get(note_id="n1").version == 2
    assert orm_effect("other", "n1", bump) == 1 and bumps == [1, 1]  # a scope of its own


def test_a_mutation_that_raises_leaves_neither_its_writes_nor_its_claim() -> None:
    note("n2")

    def half() -> int:
        Note.objects.filter(note_id="n2").update(clock="written")
        raise RuntimeError("the task died after writing")

    with pytest.raises(RuntimeError):
        orm_effect("test", "n2", half)
    assert Note.objects.get(note_id="n2").clock == "c" and effects() == 0
    assert orm_effect("test", "n2", lambda: 7) == 7  # the key is free: the retry runs


def test_inside_an_open_block_it_commits_or_rolls_back_with_it() -> None:
    note("n3")
    with pytest.raises(ValueError), transaction.atomic():
        orm_effect("test", "n3", lambda: Note.objects.filter(note_id="n3").update(clock="x"))
        raise ValueError("the caller's block fails after the effect")
    assert Note.objects.get(note_id="n3").clock == "c" and effects() == 0


def test_the_index_task_indexes_a_note_once_however_often_it_runs() -> None:
    note("n4")
    assert index_note("ada", "n4") == 1
    Note.objects.filter(note_id="n4").update(clock="edited since")
    assert index_note("ada", "n4") == 1  # run again (a crash before its job finished)
    assert Note.objects.get(note_id="n4").clock == "edited since" and effects() == 1
