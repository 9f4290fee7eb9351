"""The example's tests run on its settings with the test views' URLs; NOTES_DB names a
PostgreSQL database to run them there (pytest-django makes its test database)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

ADA = {"HTTP_AUTHORIZATION": "Bearer ada.1"}


# pigeon's tables (Django's flush between tests leaves tables it does not manage).
PIGEON_TABLES = (
    "pigeon_effects",
    "pigeon_idempotency_claims",
    "pigeon_job_reviews",
    "pigeon_job_attempts",
    "pigeon_obligations",
    "pigeon_record_events",
    "pigeon_jobs",
    "pigeon_records",
)


@pytest.fixture(autouse=True)
def _test_urls(settings: Any) -> None:
    settings.ROOT_URLCONF = "extra_urls"


@pytest.fixture(autouse=True)
def _empty_pigeon_tables(django_db_blocker: Any) -> Iterator[None]:
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        for table in PIGEON_TABLES:
            cursor.execute(f"DELETE FROM {table}")


def write(client: Any, method: str, path: str, body: Any, key: str, **extra: Any) -> Any:
    """One write of ada's, under ``key``."""
    headers = ADA | {"HTTP_IDEMPOTENCY_KEY": key} | extra
    return client.generic(method, path, json_body(body), "application/json", **headers)


def json_body(body: Any) -> str:
    import json

    return json.dumps(body)
