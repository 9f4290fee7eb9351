"""``load_app(ref, db=)`` names the loading worker's database to the app's import
(``WORKER_DB_ENV``), and only for the import: what an integration's loader checks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pigeon.jobs.app import WORKER_DB_ENV, load_app


def test_the_workers_database_is_named_while_the_app_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "recorded_app.py").write_text(
        "import os\nfrom pigeon.jobs.app import App\n"
        f"seen = os.environ.get({WORKER_DB_ENV!r})\napp = App()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(WORKER_DB_ENV, "before.db")
    load_app("recorded_app:app", db="jobs.db")
    assert sys.modules["recorded_app"].seen == "jobs.db"
    assert os.environ[WORKER_DB_ENV] == "before.db"  # put back as it was
    monkeypatch.delenv(WORKER_DB_ENV)
    load_app("recorded_app:app", db="other.db")
    assert WORKER_DB_ENV not in os.environ
    monkeypatch.delitem(sys.modules, "recorded_app")
