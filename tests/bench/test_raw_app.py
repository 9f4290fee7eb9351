"""The e2e bench's raw intake app (bench/_raw_intake_app.py) in its own uvicorn process, as
the bench runs it: it leaves no database behind once stopped."""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
from bench._servers import process, uvicorn_app

from pigeon.core.wire import HEALTH_PATH


def _folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("pigeon-raw-*"))


def test_the_raw_app_removes_its_database_when_it_stops() -> None:
    before = _folders()
    with process(uvicorn_app("bench._raw_intake_app:app"), probe_path=HEALTH_PATH) as url:
        made = _folders() - before
        assert len(made) == 1 and (made.pop() / "raw.db").exists()
        assert httpx.get(url + HEALTH_PATH).status_code == 200
    assert _folders() - before == set()
