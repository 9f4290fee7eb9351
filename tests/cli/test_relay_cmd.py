"""``pigeon relay``, ``pigeon worker --relay-to`` and ``pigeon serve --relay-to``: a broker
URL the relay cannot use is one line and exit 2 before anything starts; with a good one
the outbox drains to the broker (here the real Redis) and the process stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from pigeon.jobs.stats import relay_lag
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import wait_for

from ..conftest import require_broker
from ..jobs.brokers import TOPIC, clean_redis, fill, read_redis

PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]


def pigeon(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [*PIGEON, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize(
    ("to", "words"),
    [
        ("kafka://127.0.0.1:9092", "unknown broker scheme 'kafka://'"),
        ("127.0.0.1:6379", "is not a broker URL"),
        ("redis://", "names no host"),
        ("redis://127.0.0.1?stream=x", "unknown option 'stream'"),
        ("nats://127.0.0.1:99999", "Port out of range"),
    ],
)
def test_a_broker_url_the_relay_cannot_use_is_one_line_and_exit_2(
    tmp_path: Path, to: str, words: str
) -> None:
    db = tmp_path / "server.db"
    open_server_db(str(db)).close()
    for command in (
        ["relay", "--db", str(db), "--to", to, "--once"],
        ["worker", "--db", str(db), "--queue", "grading=1", "--relay-to", to],
        ["serve", "--db", str(tmp_path / "new.db"), "--port", "0", "--relay-to", to],
    ):
        result = pigeon(*command)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (command, result.stderr)
        assert lines[0].startswith(f"pigeon {command[0]}: ")
        assert "serving" not in result.stdout
    assert not (tmp_path / "new.db").exists()


def test_relay_refuses_a_missing_database(tmp_path: Path) -> None:
    result = pigeon("relay", "--db", str(tmp_path / "nope.db"), "--to", "redis://127.0.0.1")
    assert result.returncode == 2 and "no such database file" in result.stderr
    assert not (tmp_path / "nope.db").exists()


def test_relay_once_says_what_stopped_it(tmp_path: Path) -> None:
    """A broker that does not answer: --once exits 1 naming the cause; rows stay pending."""
    db = tmp_path / "server.db"
    database = open_server_db(str(db))
    fill(database, 3)
    database.close()
    result = pigeon("relay", "--db", str(db), "--to", "redis://127.0.0.1:1", "--once")
    assert result.returncode == 1, result.stderr
    assert "did not confirm" in result.stderr and "3 pending" in result.stdout


@pytest.fixture
def redis_prefix() -> tuple[str, str]:
    base = require_broker("redis")
    prefix = f"pigeont{uuid.uuid4().hex[:10]}:"
    yield base, prefix  # type: ignore[misc]
    clean_redis(base, prefix)


def test_serve_relay_to_drains_the_answers_outbox(
    tmp_path: Path, redis_prefix: tuple[str, str]
) -> None:
    base, prefix = redis_prefix
    db = tmp_path / "server.db"
    proc = processes.spawn(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", "--relay-to", f"{base}?prefix={prefix}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("pigeon serving on http://"), line
        url = line.split()[3]
        wait_for(lambda: _answers(url), 20, "the server", 0.05)
        for i in range(3):
            reply = httpx.post(
                url + "/answers",
                json={"question": f"q{i}", "answer": "4"},
                headers={"Idempotency-Key": str(uuid.uuid4()), "Authorization": "Bearer ada.1"},
                timeout=10,
            )
            assert reply.status_code == 202, reply.text
        wait_for(lambda: len(read_redis(base, prefix + TOPIC)) == 3, 20, "3 announcements", 0.05)
        proc.send_signal(signal.SIGTERM)
        # as without a relay: uvicorn shuts down, then ends by the signal it was sent
        assert proc.wait(15) == -signal.SIGTERM
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        processes.stop(proc, grace=0)
    database = open_server_db(str(db))
    try:
        assert relay_lag(database).pending == 0
    finally:
        database.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/pigeon/v1/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_worker_relay_to_drains_the_outbox_and_stops_on_sigterm(
    tmp_path: Path, redis_prefix: tuple[str, str]
) -> None:
    base, prefix = redis_prefix
    db = tmp_path / "server.db"
    database = open_server_db(str(db))
    ids = fill(database, 25)
    database.close()
    proc = processes.spawn(
        [*PIGEON, "worker", "--db", str(db), "--queue", "grading=1", "--processes", "1",
         "--relay-to", f"{base}?prefix={prefix}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: read_redis(base, prefix + TOPIC) == ids, 20, "the 25 rows in order", 0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            processes.stop(proc, grace=0)
