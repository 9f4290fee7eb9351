"""Fixtures of the integrations' tests: the application's database on each backend, with
its own table and pigeon's made by its migration, and each kind of session."""

from __future__ import annotations

import pytest

from tests.integrations.orders_app import prepare


@pytest.fixture
def app_db(server_db_url: str) -> str:
    """The application's database (a SQLite path or a postgresql:// URL), migrated."""
    prepare(server_db_url)
    return server_db_url


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    """The handler's kind: a sync ``Session``, or an ``AsyncSession``."""
    mode: str = request.param
    return mode
