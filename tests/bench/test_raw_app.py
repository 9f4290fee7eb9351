"""The benches' raw intake apps (bench/_raw_intake_app.py, bench/_raw_pg_app.py) in their
own uvicorn processes, as the benches run them."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from bench._servers import process, uvicorn_app
from bench.intake_pg_bench import _created, _raw, _requests

from pigeon.core.wire import HEALTH_PATH


def _folders(prefix: str) -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{prefix}*"))


# The benches' apps that make a database of their own: (app, its folder's prefix, its
# database's name, a path that answers once it is up, and how).
OWN_FOLDER = [
    ("bench._raw_intake_app:app", "pigeon-raw-", "raw.db", HEALTH_PATH, 200),
    ("bench._floor_app:app", "pigeon-floor-", "floor.db", "/none", 404),
]


@pytest.mark.parametrize(("app", "prefix", "name", "probe", "status"), OWN_FOLDER)
def test_an_app_removes_its_database_when_it_stops(
    app: str, prefix: str, name: str, probe: str, status: int
) -> None:
    before = _folders(prefix)
    with process(uvicorn_app(app), probe_path=probe) as url:
        made = _folders(prefix) - before
        assert len(made) == 1 and (made.pop() / name).exists()
        assert httpx.get(url + probe).status_code == status
    assert _folders(prefix) - before == set()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_raw_set_apps_write_each_batch_whole_on_a_shared_database(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The ceiling row's apps (two processes on one database, as the bench runs them)
    store each operation's claim, note and ledger row, and answer 201 for it; a batch
    with a key seen before is refused whole."""
    db = str(tmp_path / "raw.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    batches = _requests(100, "raw", 5)
    with _raw(db, 2) as url, httpx.Client(base_url=url) as client:
        assert [_created(client, batch) for batch in batches[:4]] == [100] * 4
        assert client.post(batches[0][0], content=batches[0][1]).status_code == 500
        with httpx.Client(base_url=url) as again:  # a 500 ended the first connection
            assert _created(again, batches[4]) == 100  # the refused batch left nothing open
    tables = ("pigeon_idempotency_claims", "ref_notes", "ref_effect_ledger")
    conn: Any = sqlite3.connect(db) if backend == "sqlite" else psycopg.connect(db)
    with contextlib.closing(conn):
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    assert counts == dict.fromkeys(tables, 500)
    assert backend == "postgres" or Path(db).exists()  # the bench's file, not the app's
