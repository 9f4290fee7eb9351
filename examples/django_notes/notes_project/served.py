"""``pigeon serve --app notes_project.served:serve --db PATH_OR_URL``, with this folder
on the path (run from it, or on ``PYTHONPATH``): the example on the command's database
and with its options (`pigeon.integrations.django.served`), its tables made first, as
``manage.py serve`` makes them (one serving process: with ``--workers N``, run
``manage.py migrate`` first). Its callers are named as ``--auth demo`` names them
(`notes.auth`)."""

from __future__ import annotations

import os
from typing import Any

from pigeon.integrations.django import served
from pigeon.server import ServerOptions


def serve(options: ServerOptions) -> Any:
    if options.database is not None:  # the database the settings read (NOTES_DB)
        os.environ.setdefault("NOTES_DB", options.database.url)
    os.environ.setdefault(served.SETTINGS_ENV, "notes_project.settings")
    app = served.serve(options)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return app
