"""Slow and idle connections, disconnects and log lines (issue 14, seen 6 and 7), over
real sockets against real uvicorn with pigeon's timed protocol (and `pigeon serve`)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from pigeon.reference.notes import create_notes_app
from pigeon.server.app import create_app
from pigeon.server.identifiers import loggable
from pigeon.server.intake import Intake, IntakeContext, OperationRequest
from pigeon.server.options import ConnectionTimeouts
from pigeon.server.timeouts import TimedConfig
from pigeon.storage.server import open_server_db
from tests import processes

from .conftest import TestClient

SHORT = ConnectionTimeouts(idle=0.6, headers=0.6, body=0.6)


@contextlib.contextmanager
def timed_server(app: Any, timeouts: ConnectionTimeouts = SHORT) -> Iterator[int]:
    """uvicorn on a free loopback port in a thread, with pigeon's timed protocol."""
    config = TimedConfig(app, host="127.0.0.1", port=0, log_level="info", timeouts=timeouts)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def port(tmp_path: Path) -> Iterator[int]:
    notes_db = open_server_db(str(tmp_path / "server.db"))
    with timed_server(create_notes_app(notes_db, purge_interval=None)) as bound:
        yield bound
    notes_db.close()


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs() -> Iterator[list[logging.LogRecord]]:
    """Every record of pigeon's and uvicorn's loggers (uvicorn's do not reach the root)."""
    handler = Records()
    names = ("pigeon", "uvicorn.error", "uvicorn")
    for name in names:
        logging.getLogger(name).addHandler(handler)
    old = logging.getLogger("pigeon").level
    logging.getLogger("pigeon").setLevel(logging.DEBUG)
    yield handler.records
    logging.getLogger("pigeon").setLevel(old)
    for name in names:
        logging.getLogger(name).removeHandler(handler)


def closed_after(conn: socket.socket, limit: float = 5.0) -> tuple[float, bytes]:
    """Seconds until the server closed ``conn``, and what it sent before."""
    started = time.monotonic()
    conn.settimeout(limit)
    received = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return time.monotonic() - started, received
        received += chunk


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout(port: int) -> None:
    """Before: it stayed open for ever."""
    with connect(port) as conn:
        waited, sent = closed_after(conn)
    assert 0.4 < waited < 3 and sent == b""


def test_half_a_head_is_answered_408_and_closed_even_a_byte_at_a_time(port: int) -> None:
    with connect(port) as conn:
        conn.sendall(b"POST /notes HTTP/1.1\r\nHost: x\r\n")
        waited, sent = closed_after(conn)
    assert 0.4 < waited < 3 and sent.startswith(b"HTTP/1.1 408 ")
    with connect(port) as conn:  # each byte inside the deadline, the head not
        started = time.monotonic()
        for byte in b"GET /pigeon/v1/health HTTP/1.1\r\n":
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
            if time.monotonic() - started > 4:
                break
        _, sent = closed_after(conn)
    assert time.monotonic() - started < 3.5 and sent.startswith(b"HTTP/1.1 408 ")


def test_half_a_body_is_closed_after_the_body_timeout_and_logged_in_one_line(
    port: int, logs: list[logging.LogRecord]
) -> None:
    """Before: open for ever; and a client that hung up mid-body logged a traceback at
    ERROR. Now the connection closes, and one INFO line says the body ended early."""
    head = (
        b"POST /notes HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    with connect(port) as conn:
        conn.sendall(head + b'{"id": "s"')
        waited, _ = closed_after(conn)
    assert 0.4 < waited < 3
    with connect(port) as conn:  # the client hangs up itself
        conn.sendall(head + b'{"id": "s"')
        time.sleep(0.2)
    time.sleep(0.3)
    assert not [r for r in logs if r.levelno >= logging.ERROR], [r.getMessage() for r in logs]
    ended = [r for r in logs if "ended after 10 bytes" in r.getMessage()]
    assert len(ended) == 2 and all(r.levelno == logging.INFO and not r.exc_info for r in ended)


def test_the_body_timeout_also_ends_a_body_no_one_reads(port: int) -> None:
    """A 413 answered at once, and the client keeps trickling its 10 GiB: closed."""
    with connect(port) as conn:
        conn.sendall(
            b"POST /notes HTTP/1.1\r\nHost: x\r\nIdempotency-Key: big\r\n"
            b"Content-Length: 10737418240\r\n\r\n"
        )
        started = time.monotonic()
        with contextlib.suppress(OSError):
            while time.monotonic() - started < 4:
                conn.sendall(b"x" * 100)
                time.sleep(0.1)
        _, sent = closed_after(conn)
    assert time.monotonic() - started < 3.5 and b" 413 " in sent


def test_a_prompt_client_keeps_its_connection_across_requests(tmp_path: Path) -> None:
    # Its own server with a longer idle timeout: pauses well under it, however loaded
    # the machine, and together well over it.
    notes_db = open_server_db(str(tmp_path / "server.db"))
    request = b"GET /pigeon/v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    timeouts = ConnectionTimeouts(idle=1.5, headers=1.5, body=1.5)
    app = create_notes_app(notes_db, purge_interval=None)
    with timed_server(app, timeouts) as port, connect(port) as conn:
        for _ in range(4):
            conn.sendall(request)
            reply = conn.recv(65536)
            while not reply.endswith(b'{"status":"ok"}'):
                reply += conn.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200 "), reply
            time.sleep(0.5)  # under the idle timeout each time, over it in total
        waited, _ = closed_after(conn, limit=10)  # then idle: closed
    notes_db.close()
    assert 0.5 < waited < 8


def test_pigeon_serve_takes_its_timeouts_from_the_command_line(tmp_path: Path) -> None:
    from tests.cli.test_serve_cmd import start

    proc, url = start(tmp_path / "server.db", "--timeout-idle", "0.5", "--timeout-headers", "0.5")
    try:
        port = int(url.rsplit(":", 1)[1])
        with connect(port) as conn:
            waited, _ = closed_after(conn)
        assert waited < 3
        with connect(port) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\n")
            waited, sent = closed_after(conn)
        assert waited < 3 and sent.startswith(b"HTTP/1.1 408 ")
    finally:
        processes.stop(proc)


@pytest.mark.parametrize("bad", ["-1", "0", "nan", "1e9"])
def test_pigeon_serve_refuses_a_timeout_out_of_range(tmp_path: Path, bad: str) -> None:
    from tests.cli.test_serve_cmd import refused

    result = refused(tmp_path / "server.db", "--timeout-body", bad)
    assert result.returncode == 2 and "timeout" in result.stderr
    assert not (tmp_path / "server.db").exists()


def test_a_path_with_cr_lf_never_forges_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a decoded path with CR/LF reached the error log verbatim."""
    notes_db = open_server_db(str(tmp_path / "server.db"))
    intake = Intake(notes_db)

    def boom(ctx: IntakeContext) -> Any:
        raise RuntimeError("handler failed")

    intake.add_operation("PUT", "/boom/{id}", boom)
    forged = "/boom/x\r\n2026-12-01 ERROR forged line"
    with caplog.at_level(logging.INFO), TestClient(create_app(intake, purge_interval=None)) as c:
        path = "/boom/x%0D%0A2026-12-01%20ERROR%20forged%20line"
        reply = c.put(path, json={}, headers={"Idempotency-Key": "crlf"})
        assert reply.status_code == 400  # refused at the door: a control character
        # A library caller that hands the intake such a path itself: logged escaped.
        op = OperationRequest(method="PUT", path=forged, body={}, key="k2", operation_id="k2")
        assert intake.execute("anonymous", op).status == 500
    messages = [r.getMessage() for r in caplog.records]
    assert messages and not [m for m in messages if "\n" in m or "\r" in m], messages
    assert any("x\\r\\n2026-12-01 ERROR forged line" in m for m in messages), messages
    assert loggable("a\u2028b") == "a\\u2028b" and loggable("ok €") == "ok €"
    notes_db.close()


def test_pigeon_serve_help_names_the_timeouts() -> None:
    from tests.cli.test_serve_cmd import PIGEON

    wide = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    out = processes.run(
        [*PIGEON, "serve", "--help"], capture_output=True, text=True, env=wide
    ).stdout
    for option in ("--timeout-idle", "--timeout-headers", "--timeout-body"):
        assert option in out
