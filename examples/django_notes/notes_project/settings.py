"""The notes example's settings, from the environment:

- ``NOTES_DB``: a SQLite file (default ``notes.sqlite3`` here) or a ``postgresql://`` URL;
- ``NOTES_ALLOW_ANONYMOUS=1``: requests without a token act as ``anonymous``;
- ``PIGEON_OPERATOR_TOKEN``: the bearer token of the operator (the ledger);
- ``NOTES_TEST_HOOKS=1`` with ``PIGEON_TEST_HOOKS=1``: pigeon's fault switch, loopback only.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

HERE = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("NOTES_SECRET_KEY", "the-notes-example-is-no-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pigeon.integrations.django",
    "notes",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "notes.auth.BearerPrincipal",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "notes_project.urls"
ASGI_APPLICATION = "notes_project.asgi.application"
STATIC_URL = "static/"


def database(url: str) -> dict[str, object]:
    """Django's DATABASES entry of a SQLite path or a postgresql:// URL."""
    if not url.startswith(("postgresql://", "postgres://")):
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": url,
            # One writer at a time, taken at BEGIN; WAL lets readers on; wait for the lock.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL",
            },
        }
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {"default": database(os.environ.get("NOTES_DB", str(HERE / "notes.sqlite3")))}

NOTES_ALLOW_ANONYMOUS = os.environ.get("NOTES_ALLOW_ANONYMOUS") == "1"
OPERATOR_TOKEN = os.environ.get("PIGEON_OPERATOR_TOKEN") or None

PIGEON = {
    "PRINCIPAL": "notes.auth.principal",
    "JOBS_APP": "notes.jobs:app",
    "TEST_HOOKS": os.environ.get("NOTES_TEST_HOOKS") == "1",
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
