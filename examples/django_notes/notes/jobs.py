"""The example's jobs: each new note is indexed once, by ``manage.py pigeon_worker``.

The job is deferred in the create's own transaction (`notes.views`): it exists exactly
when the note does. The task uses the ORM, as any Django code."""

from __future__ import annotations

from pigeon.jobs.app import App

app = App(default_owner="notes")
app.queue("notes", min_workers=1, max_workers=4)


@app.task(queue="notes")
def index_note(principal: str, note_id: str) -> None:
    from notes.models import Note  # Django is set up in the worker before this runs

    Note.objects.filter(principal=principal, note_id=note_id).update(clock="indexed")
