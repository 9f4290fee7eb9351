"""The example's jobs: each new note is indexed once, by ``manage.py pigeon_worker``.

The job is deferred in the create's own transaction (`notes.views`): it exists exactly
when the note does. The task uses the ORM, as any Django code; its writes are an atomic
effect (``pigeon.integrations.django.orm_effect``), claimed by the note in the
transaction that writes them, so a job run again after a crash writes nothing twice."""

from __future__ import annotations

from pigeon.integrations.django import orm_effect
from pigeon.jobs.app import App

app = App(default_owner="notes")
app.queue("notes", min_workers=1, max_workers=4)


@app.task(queue="notes")
def index_note(principal: str, note_id: str) -> int:
    from notes.models import Note  # Django is set up in the worker before this runs

    def index() -> int:
        return int(
            Note.objects.filter(principal=principal, note_id=note_id).update(clock="indexed")
        )

    return orm_effect("index", f"{principal}/{note_id}", index)
