"""The server fixtures (a database on each backend) for the operations tests, and one
headless Chromium for the session (Debian's package, driven by Playwright)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.conftest import notes_db, notes_pg

__all__ = ["browser", "notes_db", "notes_pg"]

CHROMIUM = os.environ.get("PIGEON_TEST_CHROMIUM", "/usr/bin/chromium")
# On a closed network Chromium's own background connections are refused and logged; these
# turn them off (and the sandbox, which needs privileges a CI container does not give).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module, with a fresh profile directory. Missing Chromium or
    Playwright: skipped, or a failure under PIGEON_REQUIRE_PG=1 (CI).

    Not per session: Playwright's sync API keeps an event loop running in the main thread
    while it is open, and every later test that calls ``asyncio.run`` (the sync engine's
    asyncio mode, the grouping and middleware tests) failed with "cannot be called from
    a running event loop"."""
    strict = os.environ.get("PIGEON_REQUIRE_PG") == "1"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the dev extra installs it
        if strict:
            raise
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if not os.path.exists(CHROMIUM):
        if strict:
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    # launch() starts Chromium on a fresh temporary profile (user-data dir) of its own,
    # removed when it closes; each test's context is a fresh cookie jar within it.
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield found
        finally:
            found.close()
