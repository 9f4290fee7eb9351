"""Lifecycle events counted in the server database: a worker recycled by its supervisor
(``worker_recycled``), the outbox relay taking over the relay lock (``relay_lock_takeover``),
a ``pigeon serve --workers N`` worker replaced by its supervisor (``serve_worker_replaced``).

Each is also one WARNING line where it happens. The count is kept in the database
(``pigeon_lifecycle_events``, one row per kind), not in the process, because ``/metrics``
is read from the database at each scrape: every process and node then exports the same
``pigeon_lifecycle_events_total{kind}``.

Best effort: a count that cannot be written is logged, and never stops the supervisor or
relay that saw the event. ``count_event_at`` (a URL: the supervisors have no database open)
writes from a short-lived thread, so an unreachable database never stalls supervision.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Final

from pigeon.logs import summary
from pigeon.storage.base import Database
from pigeon.storage.queries import QuerySet

log = logging.getLogger("pigeon.lifecycle")

WORKER_RECYCLED: Final = "worker_recycled"
RELAY_LOCK_TAKEOVER: Final = "relay_lock_takeover"
SERVE_WORKER_REPLACED: Final = "serve_worker_replaced"
KINDS: Final = (WORKER_RECYCLED, RELAY_LOCK_TAKEOVER, SERVE_WORKER_REPLACED)
MAX_DETAIL = 200

LIFECYCLE = QuerySet("lifecycle")


def event_origin(pid: int | None = None) -> str:
    """Where an event happened: this host and a process id (this one by default)."""
    return f"{socket.gethostname()} pid {os.getpid() if pid is None else pid}"


def count_event(db: Database, kind: str, detail: str = "") -> bool:
    """Count one event of ``kind`` in ``db``; False (and a log line) if it could not be."""
    if kind not in KINDS:
        raise ValueError(f"unknown lifecycle event {kind!r}; one of {KINDS}")
    params = {"kind": kind, "now": time.time(), "detail": (detail or event_origin())[:MAX_DETAIL]}
    try:
        with db.transaction() as tx:
            LIFECYCLE.run(tx, "lifecycle_count", params)
    except Exception as exc:  # a count lost must not stop what saw the event
        log.warning("could not count lifecycle event %s: %s", kind, summary(exc))
        return False
    return True


def _record_at(url: str, kind: str, detail: str) -> None:
    from pigeon.storage.server import open_server_db  # the server's storage when used

    try:
        db = open_server_db(url)
    except Exception as exc:
        log.warning("could not count lifecycle event %s: %s", kind, summary(exc))
        return
    try:
        count_event(db, kind, detail)
    finally:
        db.close()


def count_event_at(url: str, kind: str, detail: str = "") -> threading.Thread:
    """``count_event`` in the database at ``url``, opened and closed by a daemon thread
    (returned, started: a caller may join it)."""
    if kind not in KINDS:
        raise ValueError(f"unknown lifecycle event {kind!r}; one of {KINDS}")
    thread = threading.Thread(
        target=_record_at,
        args=(url, kind, detail or event_origin()),
        name="pigeon-lifecycle",
        daemon=True,
    )
    thread.start()
    return thread


__all__ = ["KINDS", "count_event", "count_event_at", "event_origin"]
