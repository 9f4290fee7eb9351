"""What ``pigeon rehearse`` needs to know of the Django example: the notes it writes, and
the tables they go to. From this folder, on a database of the rehearsal's own:

    DJANGO_SETTINGS_MODULE=notes_project.settings PIGEON_DJANGO_JOBS_APP=notes.jobs:app \
    NOTES_DB=/tmp/rehearsal.db pigeon rehearse --db /tmp/rehearsal.db \
        --app notes_project.served:serve --jobs pigeon.integrations.django.worker:app \
        --hooks notes_project.rehearsal:hooks
"""

from __future__ import annotations

import random

from pigeon.rehearse import RehearsalHooks

TITLES = ("shopping", "ideas", "errands")


def note(n: int, rng: random.Random) -> dict[str, object]:
    return {"title": rng.choice(TITLES), "body": f"note {n}"}


hooks = RehearsalHooks(requests={"POST /notes": note}, tables=("notes_note", "notes_effect"))
