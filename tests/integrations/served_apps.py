"""The apps with a batch route, each served in a thread of the test on loopback: ``pigeon
serve``'s (the reference notes app) and the FastAPI example's; their base URLs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from examples.fastapi_orders.app import create_app, migrate

from pigeon.demo.processes import serve_in_thread
from pigeon.reference.notes import create_notes_app
from pigeon.storage.server import open_server_db


@contextmanager
def pigeon_serve(tmp_path: Path) -> Iterator[str]:
    db = open_server_db(tmp_path / "notes.db")
    try:
        with serve_in_thread(create_notes_app(db, purge_interval=None)) as url:
            yield url
    finally:
        db.close()


@contextmanager
def fastapi_orders(tmp_path: Path) -> Iterator[str]:
    app = create_app(f"sqlite:///{tmp_path / 'orders.db'}")
    migrate(app.state.engine)
    try:
        with serve_in_thread(app) as url:
            yield url
    finally:
        app.state.engine.dispose()
