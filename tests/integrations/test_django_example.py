"""The Django example's own tests (examples/django_notes/tests, pytest-django) pass, on
SQLite and PostgreSQL: run as their own pytest, in the example's directory, with its
settings (the main suite leaves pytest-django off)."""

from __future__ import annotations

import os
import sys

from tests import processes
from tests.integrations.django_notes import EXAMPLE


def test_the_examples_own_tests_pass(server_db_url: str) -> None:
    # Its own pytest: not the settings, nor the options (PYTEST_ADDOPTS) of this run.
    dropped = {"DJANGO_SETTINGS_MODULE", "PYTEST_ADDOPTS"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if server_db_url.startswith("postgresql://"):
        env["NOTES_DB"] = server_db_url  # pytest-django makes test_<name> beside it
    done = processes.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # The exit status says whether a test failed; the output may name a test "..._failed".
    shown = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, shown
    assert " passed" in done.stdout, shown  # and it ran tests: all skipped exits 0 too
