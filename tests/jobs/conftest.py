"""Every jobs test opens its database through ``db`` / ``server_db_url``
(tests/databases.py): it runs on both backends. The worker threads a test started are
stopped before its fixtures (its database among them) are torn down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.jobs.threads import stop_all


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    stop_all()
    yield
