"""``python manage.py pigeon_worker --queue NAME=MAX``: pigeon's workers (the supervisor of
``pigeon worker``) on the database of Django's settings, running the project's jobs
app (``--app`` or ``PIGEON["JOBS_APP"]``) with Django set up in each worker process."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS

from pigeon import logs
from pigeon.exceptions import PigeonError
from pigeon.integrations.django.conf import configured
from pigeon.integrations.django.worker import APP_REF, JOBS_APP_ENV, database_url
from pigeon.jobs.autoscale import Budget, budget_numbers, checked_budget
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.supervisor import Supervisor


def budgets(values: list[str]) -> dict[str, int | Budget]:
    """``NAME=MAX`` or ``NAME=MIN:MAX`` threads of each queue."""
    found: dict[str, int | Budget] = {}
    for value in values:
        name, sep, spec = value.partition("=")
        if not sep or not name or name in found:
            raise CommandError(f"--queue {value!r}: NAME=MAX or NAME=MIN:MAX, each queue once")
        try:
            found[name] = checked_budget(*budget_numbers(spec))
        except PigeonError as exc:
            raise CommandError(f"--queue {value!r}: {exc}") from exc
    return found


class Command(BaseCommand):
    help = "Run pigeon's job workers on this project's database until SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", action="append", required=True, metavar="NAME=MAX")
        parser.add_argument("--app", help="module:attr of the pigeon.jobs.App (PIGEON['JOBS_APP'])")
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS, help="the database alias")
        parser.add_argument("--processes", type=int, default=min(2, os.cpu_count() or 1))

    def handle(self, *args: Any, **options: Any) -> None:
        ref = options["app"] or configured().jobs_app
        if not ref:
            raise CommandError("name the jobs app: --app module:attr or PIGEON['JOBS_APP']")
        if options["database"] not in settings.DATABASES:
            raise CommandError(f"no database {options['database']!r} in settings.DATABASES")
        if options["processes"] < 1:
            raise CommandError("--processes must be at least 1")
        try:
            url = database_url(settings.DATABASES[options["database"]])
            os.environ[JOBS_APP_ENV] = ref  # for the worker processes, which set Django up
            supervisor = Supervisor(
                APP_REF,
                url,
                budgets(options["queue"]),
                processes=options["processes"],
                options=WorkerOptions(keys_file=getattr(settings, "PIGEON", {}).get("KEYS_FILE")),
            )
        except PigeonError as exc:
            raise CommandError(str(exc)) from exc
        logs.configure("text", "INFO")
        self.stdout.write(f"pigeon worker: {supervisor.sizes()}")
        self.stdout.flush()
        supervisor.run()
