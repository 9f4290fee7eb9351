"""What ``pigeon rehearse`` needs to know of the Django example
(``--app notes_project.served:serve --jobs pigeon.integrations.django.worker:app``, with
examples/django_notes on the path): the notes it writes, and the tables they go to."""

from __future__ import annotations

import random

from pigeon.rehearse import RehearsalHooks

TITLES = ("shopping", "ideas", "errands")


def note(n: int, rng: random.Random) -> dict[str, object]:
    return {"title": rng.choice(TITLES), "body": f"note {n}"}


hooks = RehearsalHooks(requests={"POST /notes": note}, tables=("notes_note", "notes_effect"))
