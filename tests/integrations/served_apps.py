"""The apps with a batch route, each served in a thread of the test on loopback: ``pigeon
serve``'s (the reference notes app) and the FastAPI example's; their base URLs. And a
batch of a given size, for the limits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from examples.fastapi_orders.app import create_app, migrate

from pigeon.core.wire import BATCH_PATH
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


def batch_of(url: str, size: int, key: str) -> int:
    """The status of a batch of one note padded to ``size`` bytes, posted to ``url``."""
    entry = {"idempotency_key": key, "method": "POST", "path": "/notes", "body": {"id": key}}
    head = json.dumps({"operations": [entry], "pad": ""}).encode()
    body = head[:-2] + b"x" * (size - len(head)) + b'"}'
    headers = {"Content-Type": "application/json", "Authorization": "Bearer ada.1"}
    return httpx.post(url + BATCH_PATH, content=body, headers=headers, timeout=30).status_code
