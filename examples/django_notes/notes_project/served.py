"""``pigeon serve --app notes_project.served:serve --db PATH_OR_URL``, with this folder
on the path (run from it, or on ``PYTHONPATH``): the example on the command's database
and with its options (`pigeon.integrations.django.served`), its tables made first, as
``manage.py serve`` makes them, by one serving process. With ``--workers N`` each worker
builds the app on its event loop, all at once: there the tables must be migrated
already (``manage.py migrate``), and a worker that finds them not is refused."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Any

from pigeon.exceptions import ConfigurationError
from pigeon.integrations.django import served
from pigeon.server import ServerOptions


def serve(options: ServerOptions) -> Any:
    if options.database is not None:  # the database the settings read (NOTES_DB)
        os.environ.setdefault("NOTES_DB", options.database.url)
    os.environ.setdefault(served.SETTINGS_ENV, "notes_project.settings")
    app = served.serve(options)
    if not _on_event_loop():
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return app
    # Django refuses a synchronous database call on an event loop: read in a thread.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        pending = thread.submit(_pending).result()
    if pending:
        raise ConfigurationError(
            f"{pending} migrations of the project are not applied: with --workers N, run "
            "manage.py migrate first",
            field="app",
        )
    return app


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _pending() -> int:
    """How many of the project's migrations are not applied to its database."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    try:
        return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    finally:
        connection.close()
