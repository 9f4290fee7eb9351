"""``manage.py pigeon_worker``'s parts: pigeon's database URL from Django's settings, and
the jobs app each worker process loads after setting Django up.

The supervisor starts its worker processes afresh (``spawn``); each imports
``pigeon.integrations.django.worker:app``, which sets Django up (the settings module of
the environment ``manage.py`` set) and then loads the project's ``pigeon.jobs.App``
named in ``PIGEON_DJANGO_JOBS_APP``: the tasks may use the ORM as any Django code.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import WORKER_DB_ENV, App, load_app
from pigeon.urls import redact_urls

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
    check_database(os.environ.get(WORKER_DB_ENV))
    return load_app(ref)


def check_database(db: str | None) -> None:
    """Refuse (ConfigurationError) a worker whose database (``db``, named by the worker
    loading this app) is none of the project's: the project's views defer their jobs in
    its own databases, so such a worker would never run them, and the tasks it did run
    would write through the ORM to a database their jobs are not in. None: no worker
    named one."""
    from django.conf import settings

    if not db:
        return
    theirs: dict[str, str] = {}
    for alias, database in settings.DATABASES.items():
        with contextlib.suppress(ConfigurationError):  # in memory, or not SQLite/PostgreSQL
            theirs[alias] = database_url(database)
    if any(same_database(db, url) for url in theirs.values()):
        return
    listed = ", ".join(f"{alias}: {url}" for alias, url in theirs.items()) or "none"
    raise ConfigurationError(
        redact_urls(
            f"the workers' database {db} is none of the project's ({listed}): the project's "
            "jobs are deferred in its own (manage.py pigeon_worker takes the project's)"
        ),
        field="db",
    )


def same_database(one: str, other: str) -> bool:
    """Do two database URLs or SQLite paths name the same database?"""
    postgres = ("postgresql://", "postgres://")
    if one.startswith(postgres) != other.startswith(postgres):
        return False
    if not one.startswith(postgres):
        return Path(one).resolve() == Path(other).resolve()

    def where(url: str) -> tuple[str, int, str, str]:
        parts = urlsplit(url)
        host, port = parts.hostname or "localhost", parts.port or 5432
        return host, port, unquote(parts.path.lstrip("/")), unquote(parts.username or "")

    return where(one) == where(other)


def __getattr__(name: str) -> App:
    # ``app``, looked up by the worker processes' ``load_app``: loaded when asked for, once
    # the command has named it (the command imports this module before it does).
    if name == "app":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
