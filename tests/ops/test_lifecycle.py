"""Lifecycle events (a worker recycled, a relay lock taken over, a ``pigeon serve`` worker
replaced) are counted in the database, so ``/metrics``, read from the database at each
scrape, shows every process's and node's events alike; a count that cannot be written is
logged and never raised. The events themselves, from their real sources, are counted in
tests/jobs/test_supervisor.py, tests/jobs/test_relay_brokers.py and tests/cli/test_serve_cmd.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pigeon import lifecycle
from pigeon.storage.server import open_server_db
from tests.ops.scrape import lifecycle_counts, metrics_text

ZERO = dict.fromkeys(lifecycle.KINDS, 0.0)


def test_every_kind_is_a_counter_from_zero(server_db_url: str) -> None:
    notes_db = open_server_db(server_db_url)
    try:
        text = metrics_text(notes_db)
    finally:
        notes_db.close()
    assert "# TYPE pigeon_lifecycle_events_total counter" in text
    assert lifecycle_counts(text) == ZERO


def test_events_counted_by_two_processes_are_one_count_for_every_scraper(
    server_db_url: str,
) -> None:
    """Two writers (two processes, two nodes: two connections here) add to one count per
    kind; a third connection (another node's /metrics) reads the sum."""
    first, second, scraper = (open_server_db(server_db_url) for _ in range(3))
    try:
        assert lifecycle.count_event(first, lifecycle.WORKER_RECYCLED)
        assert lifecycle.count_event(second, lifecycle.WORKER_RECYCLED, "node-b pid 7")
        assert lifecycle.count_event(second, lifecycle.RELAY_LOCK_TAKEOVER)
        lifecycle.count_event_at(server_db_url, lifecycle.SERVE_WORKER_REPLACED).join(30)
        counts = lifecycle_counts(metrics_text(scraper))
    finally:
        for notes_db in (first, second, scraper):
            notes_db.close()
    assert counts == {
        "worker_recycled": 2.0,
        "relay_lock_takeover": 1.0,
        "serve_worker_replaced": 1.0,
    }


def test_a_count_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pigeon.lifecycle")
    notes_db = open_server_db(str(tmp_path / "server.db"))
    notes_db.close()  # what saw the event goes on; the count is lost and said so
    assert lifecycle.count_event(notes_db, lifecycle.RELAY_LOCK_TAKEOVER) is False
    foreign = tmp_path / "foreign.db"
    foreign.write_bytes(b"not a database" * 100)
    thread = lifecycle.count_event_at(str(foreign), lifecycle.WORKER_RECYCLED)
    thread.join(30)
    assert not thread.is_alive()
    lost = [r for r in caplog.records if "could not count lifecycle event" in r.getMessage()]
    assert [r.levelno for r in lost] == [logging.WARNING, logging.WARNING]
    with pytest.raises(ValueError, match="unknown lifecycle event"):
        lifecycle.count_event(notes_db, "worker_exploded")
