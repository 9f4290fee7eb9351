"""``pigeon serve`` drained by SIGTERM (a deploy stopping the old intake): it stops
accepting connections at once, lets the requests in flight finish and commit within its
deadline (``DRAIN_DEADLINE`` by default, ``--drain-timeout``), and ends; a request still
running at the deadline is cut off with nothing of it written, so the client's retry with
the same key runs it afresh.

The requests are held in flight by the test hooks (``X-Pigeon-Test-Delay-Ms``: the
handler holds after its key is claimed, inside its transaction)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pigeon.server.testhooks import DELAY, ENV_KEY, FAIL
from pigeon.storage.server import open_server_db
from tests import processes
from tests.cli.test_serve_cmd import OPERATOR_TOKEN, USER, start

DRAIN_DEADLINE = 5.0  # seconds: pigeon serve's default --drain-timeout
ENV = os.environ | {"PIGEON_OPERATOR_TOKEN": OPERATOR_TOKEN, ENV_KEY: "1"}

pytestmark = pytest.mark.chaos


def _post(url: str, key: str, delay_ms: int = 0, *, fail: bool = False) -> httpx.Response:
    headers = {"Idempotency-Key": key, **USER}
    if delay_ms:
        headers[DELAY] = str(delay_ms)
    if fail:
        headers[FAIL] = "1"
    return httpx.post(url + "/notes", json={"id": key}, headers=headers, timeout=60)


def _hold(url: str, key: str, delay_ms: int, out: dict[str, Any]) -> threading.Thread:
    """Send the request under ``key`` held for ``delay_ms`` and return once the server says
    it is running: a duplicate of it is answered 409 key-in-progress at once. The duplicate
    carries the fail switch, so one that arrives first writes nothing and frees the key
    (a 500); the original, refused 409 while that duplicate held the key, is sent again."""
    sender = _send(url, key, delay_ms, out)
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        if _post(url, key, fail=True).status_code == 409 and sender.is_alive():
            return sender
        if not sender.is_alive():  # lost the race to a duplicate: send it again
            sender = _send(url, key, delay_ms, out)
        time.sleep(0.05)
    raise AssertionError(f"request {key!r} never seen in flight")


def _send(url: str, key: str, delay_ms: int, out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            out[key] = _post(url, key, delay_ms)
        except httpx.TransportError as exc:
            out[key] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _notes(db: Path) -> set[str]:
    database = open_server_db(str(db))
    try:
        with database.transaction() as tx:
            return {r["id"] for r in tx.sql("SELECT id FROM ref_notes", {}).fetchall()}
    finally:
        database.close()


def _refused(url: str) -> bool:
    try:
        httpx.get(url + "/pigeon/v1/health", timeout=1)
    except httpx.ConnectError:
        return True
    return False


def test_sigterm_finishes_requests_in_flight_and_accepts_no_new_ones(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    proc, url = start(db, "--test-hooks", env=ENV)
    out: dict[str, Any] = {}
    try:
        sender = _hold(url, "in-flight", 3000, out)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        refused = time.monotonic() + 2.0
        while not _refused(url):  # the listening socket goes first
            assert time.monotonic() < refused, "still accepting after SIGTERM"
            time.sleep(0.02)
        assert sender.is_alive(), "the request in flight ended before the listener closed"
        sender.join(30)
        code = proc.wait(DRAIN_DEADLINE + 10)
        took = time.monotonic() - stopped
    finally:
        processes.stop(proc, grace=0)
    answer = out["in-flight"]
    assert isinstance(answer, httpx.Response) and answer.status_code == 201, answer
    assert code == -signal.SIGTERM and took < DRAIN_DEADLINE + 5, (code, took)
    assert "in-flight" in _notes(db)  # committed before the process ended


def _cut_off(db: Path, key: str, *args: str) -> float:
    """Serve, hold a request under ``key`` past any deadline, SIGTERM the server: the
    seconds it took to end. The request is never answered a success nor written."""
    proc, url = start(db, "--test-hooks", *args, env=ENV)
    out: dict[str, Any] = {}
    try:
        sender = _hold(url, key, 60_000, out)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(DRAIN_DEADLINE + 15)
        took = time.monotonic() - stopped
        sender.join(10)
    finally:
        processes.stop(proc, grace=0)
    assert not (isinstance(out[key], httpx.Response) and out[key].is_success)
    assert key not in _notes(db)  # the transaction never committed
    return took


def test_a_request_past_the_drain_deadline_is_cut_off_with_nothing_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    took = _cut_off(db, "too-slow")
    assert DRAIN_DEADLINE - 0.5 < took < DRAIN_DEADLINE + 10, took  # waited, then cut off
    # The key was never completed: the client's retry runs it afresh, once.
    again, url = start(db, env=ENV)
    try:
        retry = _post(url, "too-slow")
        assert retry.status_code == 201 and "Idempotent-Replayed" not in retry.headers
        assert _post(url, "too-slow").headers.get("Idempotent-Replayed") == "true"
    finally:
        processes.stop(again, grace=10)


def test_a_shorter_drain_timeout_is_honoured(tmp_path: Path) -> None:
    """``--drain-timeout 1``: a request held past it is cut off after about a second, not
    after the default five, with nothing of it written."""
    took = _cut_off(tmp_path / "server.db", "cut-short", "--drain-timeout", "1")
    assert 0.5 < took < DRAIN_DEADLINE - 1.5, took  # its own deadline, not the default
