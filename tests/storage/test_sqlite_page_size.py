"""SQLiteDatabase's page_size option: applied to new files only; server files unchanged."""

from __future__ import annotations

from pathlib import Path

from pigeon.storage.queries import load_queries
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase
from tests.storage.conftest import page_size

APP = 0x50474E45


def _open(path: Path, page_size: int | None) -> SQLiteDatabase:
    return SQLiteDatabase(
        path,
        application_id=APP,
        components=("edge",),
        queries=load_queries("sqlite", "edge"),
        page_size=page_size,
    )


def test_page_size_is_set_on_a_new_file(tmp_path: Path) -> None:
    _open(tmp_path / "a.db", 1024).close()
    assert page_size(tmp_path / "a.db") == 1024


def test_page_size_does_not_rewrite_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    _open(path, None).close()
    before = page_size(path)
    _open(path, 1024).close()
    assert page_size(path) == before == 4096


def test_server_files_keep_sqlites_defaultpage_size(tmp_path: Path) -> None:
    open_server_db(tmp_path / "server.db").close()
    assert page_size(tmp_path / "server.db") == 4096
