"""The outbox relay against the real Redis, NATS JetStream and RabbitMQ on this machine
(CI starts them): order kept, a relay SIGKILLed between the broker's confirmation and the
mark (no loss; duplicates only where the broker cannot drop them, counted), and a broker
gone mid-stream (no loss, no reordering)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pigeon.jobs.backoff import Backoff
from pigeon.jobs.publishers import open_publisher
from pigeon.jobs.relay import TEST_DIE_AFTER_ENV, Relay, RelayRunner
from pigeon.jobs.stats import relay_lag
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests import processes
from tests.ops.scrape import lifecycle_counts, metrics_text
from tests.waiting import wait_for

from ..conftest import require_broker
from .brokers import CutProxy, OwnBroker, Target, fill, first_occurrences, make_target

KINDS = ["redis", "nats", "amqp"]


@pytest.fixture(params=KINDS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    t = make_target(request.param, require_broker(request.param))
    yield t
    t.cleanup()


def test_publishes_in_outbox_order_and_marks_after_the_confirmation(
    db: Database, target: Target
) -> None:
    ids = fill(db, 250)
    publisher = open_publisher(target.url)
    try:
        relay = Relay(db, publisher, batch=100)
        assert relay.drain() == 250
    finally:
        publisher.close()
    assert target.read() == ids
    assert relay_lag(db).pending == 0 and relay.counts.duplicates == 0


def run_relay(
    server_db_url: str, to: str, *, die_after: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop(TEST_DIE_AFTER_ENV, None)
    if die_after is not None:
        env[TEST_DIE_AFTER_ENV] = str(die_after)
    return processes.run(
        [sys.executable, "-m", "pigeon", "relay", "--db", server_db_url, "--to", to, "--once",
         "--batch", "40"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_relay_killed_between_confirm_and_mark_loses_nothing(
    server_db_url: str, target: Target
) -> None:
    """The relay SIGKILLs itself once the broker confirmed 100 rows: batches of 40, so
    rows 1-80 are marked and rows 81-120 are confirmed but not marked when it dies. The
    next relay publishes 81-200: Redis and NATS drop the 40 repeats, RabbitMQ delivers
    them again (counted and reported)."""
    db = open_server_db(server_db_url)
    try:
        ids = fill(db, 200)
    finally:
        db.close()
    killed = run_relay(server_db_url, target.url, die_after=100)
    assert killed.returncode == -9, killed.stderr
    db = open_server_db(server_db_url)
    try:
        assert relay_lag(db).pending == 120  # 80 marked before the kill
    finally:
        db.close()
    again = run_relay(server_db_url, target.url)
    assert again.returncode == 0, again.stderr
    held = target.read()
    duplicates = len(held) - len(set(held))
    print(f"{target.kind}: {len(held)} held for {len(ids)} rows, {duplicates} duplicates")
    assert first_occurrences(held) == ids  # nothing lost, first copies in outbox order
    if target.dedups:
        assert duplicates == 0 and held == ids
        assert "broker dropped 40 repeats" in again.stdout
    else:
        assert duplicates == 40  # RabbitMQ: the confirmed-but-unmarked batch, again
        assert held == ids[:120] + ids[80:]


@pytest.mark.parametrize("kind", KINDS)
def test_broker_gone_mid_stream_loses_and_reorders_nothing(kind: str, tmp_path: Path) -> None:
    """Rows keep coming while the broker is stopped (Redis, NATS: an instance of this
    test's own, stopped and started on its port) or cut off (RabbitMQ: every connection
    through a proxy cut, new ones refused); the relay backs off and resumes at the first
    unconfirmed row."""
    own: OwnBroker | None = None
    proxy: CutProxy | None = None
    if kind == "amqp":
        base = require_broker(kind)
        proxy = CutProxy("127.0.0.1", urlsplit(base).port or 5672)
        target = make_target(kind, base, relay_base=proxy.url_for(base))
    else:
        own = OwnBroker(kind, tmp_path / kind)
        own.start()
        target = make_target(kind, own.url)

    def stop() -> None:
        own.stop() if own else proxy.cut()  # type: ignore[union-attr]

    def start() -> None:
        own.start() if own else proxy.restore()  # type: ignore[union-attr]

    db_path = str(tmp_path / "server.db")
    db = open_server_db(db_path)
    runner = RelayRunner(db_path, target.url, batch=20, interval=0.02)
    runner.relay.backoff = Backoff(base=0.05, cap=0.3)
    runner.start()
    ids: list[str] = []
    try:
        for round_ in range(30):
            ids += fill(db, 10, start=len(ids))
            time.sleep(0.03)
            if round_ == 10:
                wait_for(partial(_some_sent, db, len(ids)))
                stop()
            if round_ == 20:
                start()
        wait_for(lambda: relay_lag(db).pending == 0, 30)
        runner.stop()
        held = target.read()
    finally:
        runner.stop()
        db.close()
        target.cleanup()
        if own:
            own.stop()
        if proxy:
            proxy.close()
    duplicates = len(held) - len(set(held))
    print(f"{kind}: {runner.relay.counts.failures} failed passes, {duplicates} duplicates")
    assert runner.relay.counts.failures >= 1  # the outage was met, not slept through
    assert first_occurrences(held) == ids  # nothing lost or reordered
    if kind != "amqp":
        assert held == ids  # and nothing twice


def _some_sent(db: Database, total: int) -> bool:
    return relay_lag(db).pending < total


def test_one_relay_at_a_time_and_a_stand_by_takes_over(
    server_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two relays on one outbox (two nodes' workers with --relay-to, say): one publishes,
    the other stands by, and takes over when the first stops, saying so in one line at
    WARNING (every command's default level)."""
    caplog.set_level(logging.WARNING, logger="pigeon.jobs.relay")
    target = make_target("redis", require_broker("redis"))
    db = open_server_db(server_db_url)
    first = RelayRunner(server_db_url, target.url, interval=0.02, standby=0.05).start()
    wait_for(first.lock.held)
    second = RelayRunner(server_db_url, target.url, interval=0.02, standby=0.05).start()
    try:
        ids = fill(db, 50)
        wait_for(lambda: relay_lag(db).pending == 0)
        time.sleep(0.2)
        assert not second.lock.held() and second.relay.counts.published == 0
        first.stop()
        ids += fill(db, 50, start=50)
        wait_for(lambda: relay_lag(db).pending == 0)
        assert second.lock.held()
        assert (first.relay.counts.published, second.relay.counts.published) == (50, 50)
        took = [r for r in caplog.records if "took over the relay lock" in r.getMessage()]
        assert [(r.levelno, r.threadName) for r in took] == [(logging.WARNING, "pigeon-relay")]
        # and counted in the database, as /metrics shows it
        assert lifecycle_counts(metrics_text(db))["relay_lock_takeover"] == 1
        assert target.read() == ids
    finally:
        first.stop()
        second.stop()
        db.close()
        target.cleanup()
