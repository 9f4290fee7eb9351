"""A bench app's own database folder, made when its uvicorn process imports it and
removed when that process stops (bench/_floor_app.py, bench/_raw_intake_app.py)."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any

Lifespan = Callable[[Any], contextlib.AbstractAsyncContextManager[None]]


def removed_when_stopped(conn: sqlite3.Connection, folder: str | None) -> Lifespan:
    """A Starlette lifespan that closes ``conn`` and removes ``folder`` (None: a file the
    app was given, left to whoever made it) at shutdown. uvicorn ends a SIGTERM by the
    signal's own default action once it has shut down, so no atexit hook would run."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        conn.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    return lifespan
