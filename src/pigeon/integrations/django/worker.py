"""``manage.py pigeon_worker``'s parts: pigeon's database URL from Django's settings, and
the jobs app each worker process loads after setting Django up.

The supervisor starts its worker processes afresh (``spawn``); each imports
``pigeon.integrations.django.worker:app``, which sets Django up (the settings module of
the environment ``manage.py`` set) and then loads the project's ``pigeon.jobs.App``
named in ``PIGEON_DJANGO_JOBS_APP``: the tasks may use the ORM as any Django code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import App, load_app

JOBS_APP_ENV = "PIGEON_DJANGO_JOBS_APP"
APP_REF = "pigeon.integrations.django.worker:app"
# Django's own OPTIONS of a PostgreSQL database: not libpq's connection parameters.
DJANGO_OPTIONS = frozenset(
    {"pool", "server_side_binding", "isolation_level", "assume_role", "cursor_factory"}
)


def database_url(database: Mapping[str, Any]) -> str:
    """pigeon's URL of one of ``settings.DATABASES``: a SQLite path, or a
    ``postgresql://`` URL with its user, password, host, port and libpq options."""
    engine = str(database.get("ENGINE", ""))
    name = str(database.get("NAME") or "")
    if engine.rpartition(".")[2].startswith("sqlite"):
        if not name or name == ":memory:" or "mode=memory" in name:
            raise ConfigurationError("pigeon's workers need a SQLite file, not an in-memory one")
        return name
    if not engine.endswith(("postgresql", "postgresql_psycopg2")):
        raise ConfigurationError(f"pigeon runs on SQLite and PostgreSQL, not {engine}")
    user = quote(str(database.get("USER") or ""), safe="")
    password = quote(str(database.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(database.get("HOST") or "")
    port = str(database.get("PORT") or "")
    location = host + (f":{port}" if port else "")
    options = {
        key: value
        for key, value in dict(database.get("OPTIONS") or {}).items()
        if key not in DJANGO_OPTIONS and isinstance(value, str | int)
    }
    query = f"?{urlencode(options)}" if options else ""
    return f"postgresql://{credentials}{location}/{quote(name, safe='')}{query}"


def _load() -> App:
    import django

    ref = os.environ.get(JOBS_APP_ENV)
    if not ref:
        raise ConfigurationError(
            f"{JOBS_APP_ENV} names no jobs app (manage.py pigeon_worker sets it)"
        )
    django.setup()
    return load_app(ref)


def __getattr__(name: str) -> App:
    # ``app``, looked up by the worker processes' ``load_app``: loaded when asked for, once
    # the command has named it (the command imports this module before it does).
    if name == "app":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
