"""A Django project served by ``pigeon serve --app pigeon.integrations.django.served:serve``:

    DJANGO_SETTINGS_MODULE=mysite.settings pigeon serve --db db.sqlite3 \\
        --app pigeon.integrations.django.served:serve

serves the project's ASGI application, the bodies of pigeon's routes read under their
limits first (`read_bodies_first`), with the command's options in its ``PIGEON``
settings for this process: the idempotency policy, the body limit, the key file and the
test hooks (the project's other ``PIGEON`` keys are kept). The command's database
(``--db``) must be the project's default one, where pigeon serve migrates pigeon's tables
and its workers and ``pigeon rehearse`` look: another is refused, naming both. What the
project would not heed is refused too: it names its callers itself
(``PIGEON["PRINCIPAL"]``), so ``--auth jwt`` and ``--allow-anonymous``, and a view claims
its key in its own transaction, so the separate claim mode and ``--in-progress-wait``.
The project's own tables are its to migrate (``manage.py migrate``) before it is served.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp

from pigeon.exceptions import ConfigurationError
from pigeon.integrations.claims import refuse_unheeded_by_apps
from pigeon.integrations.django.asgi import read_bodies_first
from pigeon.integrations.django.conf import POLICY_SETTINGS
from pigeon.integrations.django.worker import database_url, same_database
from pigeon.server.options import ServerOptions, over_own
from pigeon.urls import redact_urls

__all__ = ["pigeon_settings", "serve"]

SETTINGS_ENV = "DJANGO_SETTINGS_MODULE"


def serve(options: ServerOptions) -> ASGIApp:
    """The ASGI application of the project ``DJANGO_SETTINGS_MODULE`` names, set up with
    ``options`` (see the module's note); a ConfigurationError naming what is wrong."""
    if not os.environ.get(SETTINGS_ENV):
        raise ConfigurationError(
            f"{SETTINGS_ENV} names no settings module: set it to the project's "
            "(for example mysite.settings)",
            field="app",
        )
    if options.database is None:
        raise ConfigurationError("these ServerOptions name no database", field="db")
    refuse_unheeded(options)
    from django.conf import settings
    from django.core.asgi import get_asgi_application

    default = dict(settings.DATABASES.get("default") or {})
    theirs = database_url(default)
    if not same_database(theirs, options.database.url):
        raise ConfigurationError(
            redact_urls(
                f"--db {options.database.url} is not the project's default database "
                f"({theirs}): pigeon serve migrates pigeon's tables in --db, and the "
                "project's views claim their keys in its own"
            ),
            field="db",
        )
    settings.PIGEON = pigeon_settings(options, getattr(settings, "PIGEON", {}))
    return read_bodies_first(get_asgi_application())


def refuse_unheeded(options: ServerOptions) -> None:
    """Refuse (ConfigurationError) an option the project would not heed."""
    refusals = (
        (options.auth.auth != "demo", "auth", "--auth jwt"),
        (bool(options.auth.allow_anonymous), "allow_anonymous", "--allow-anonymous"),
    )
    for refused, field, flag in refusals:
        if refused:
            raise ConfigurationError(
                f"a Django project served by pigeon serve does not heed {flag}: it names "
                "its callers itself (PIGEON['PRINCIPAL'])",
                field=field,
            )
    refuse_unheeded_by_apps(options, "a Django project's @idempotent view")


def pigeon_settings(options: ServerOptions, current: Mapping[str, Any]) -> dict[str, Any]:
    """The project's ``PIGEON`` settings (``current``) with the options the command was
    given in their place (`over_own`): a value the command took by default leaves the
    project's own (its ``MAX_BODY`` holds unless ``--max-body`` says otherwise). The test
    hooks are always the command's, so a project's settings cannot turn them on unasked."""
    policy, usual = options.intake.policy, ServerOptions()
    commanded = {
        name: (getattr(policy, field), getattr(usual.intake.policy, field))
        for name, field in POLICY_SETTINGS.items()
    }
    commanded["MAX_BODY"] = (options.limits.max_body, usual.limits.max_body)
    commanded["MAX_BATCH_BODY"] = (options.limits.max_batch_body, usual.limits.max_batch_body)
    merged = dict(current)
    for name, (value, default) in commanded.items():
        merged[name] = over_own(value, default, current.get(name, value))
    merged["TEST_HOOKS"] = options.intake.test_hooks
    if options.database is not None and options.database.keys_file:
        merged["KEYS_FILE"] = options.database.keys_file
    return merged
