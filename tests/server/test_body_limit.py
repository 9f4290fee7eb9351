"""Request body limits: an over-large body is refused with 413 before it is read whole,
and nothing of it runs or is stored. Real uvicorn on loopback, real databases."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from pigeon.core.wire import BATCH_PATH, PROBLEM_JSON, PROBLEM_PREFIX
from pigeon.edge.options import QueueOptions
from pigeon.exceptions import ConfigurationError
from pigeon.reference.notes import create_note, create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, DEFAULT_MAX_BODY
from pigeon.server.options import BodyLimits, ServerOptions
from pigeon.storage.base import Database
from pigeon.sync.classify import ReplyKind, classify
from tests import processes
from tests.rawhttp import read_response
from tests.splitting import delivered_in_batches
from tests.waiting import until_answers

from .conftest import live_server

TOO_LARGE = PROBLEM_PREFIX + "body-too-large"
MAX_BODY = 4000
MAX_BATCH_BODY = 10_000


def note_body(size: int, note_id: str = "n") -> bytes:
    """A note's JSON body of exactly ``size`` bytes."""
    empty = json.dumps({"id": note_id, "text": ""}, separators=(",", ":")).encode()
    body = json.dumps({"id": note_id, "text": "x" * (size - len(empty))}, separators=(",", ":"))
    assert len(body.encode()) == size
    return body.encode()


def batch_body(size: int) -> bytes:
    """A batch of one note whose JSON body has exactly ``size`` bytes."""

    def make(text: str) -> bytes:
        entry: dict[str, Any] = {"id": "b1", "idempotency_key": "bk", "method": "POST"}
        entry |= {"path": "/notes", "body": {"id": "b", "text": text}}
        return json.dumps({"operations": [entry]}, separators=(",", ":")).encode()

    body = make("x" * (size - len(make(""))))
    assert len(body) == size
    return body


def chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def stored(notes_db: Database) -> tuple[int, int]:
    """(idempotency claims, ledger rows) in the server's database."""
    with notes_db.transaction() as tx:
        claims = tx.fetchone("claim_stats")
    assert claims is not None
    return int(claims["claims"]), len(read_ledger(notes_db))


def assert_too_large(response: httpx.Response, limit: int, seen: str) -> None:
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    problem = response.json()
    assert problem["type"] == TOO_LARGE and problem["title"] == "Request body too large"
    assert problem["max_bytes"] == limit
    assert f"at most {limit} bytes" in problem["detail"] and seen in problem["detail"]


def limited(max_body: int, max_batch_body: int) -> ServerOptions:
    return ServerOptions(limits=BodyLimits(max_body, max_batch_body))


@pytest.fixture
def url(notes_db: Database) -> Iterator[str]:
    app = create_notes_app(notes_db, limited(MAX_BODY, MAX_BATCH_BODY), purge_interval=None)
    with live_server(app) as base:
        yield base


def post(url: str, path: str, content: Any, key: str = "k1") -> httpx.Response:
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    return httpx.post(url + path, content=content, headers=headers, timeout=10)


@pytest.mark.parametrize(("path", "limit"), [("/notes", MAX_BODY), (BATCH_PATH, MAX_BATCH_BODY)])
def test_a_content_length_over_the_limit_is_refused_before_a_byte_of_body_is_sent(
    url: str, notes_db: Database, path: str, limit: int
) -> None:
    """Ten GiB announced, none sent: the 413 comes at once, so the body was never awaited."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {10 << 30}\r\n\r\n".encode()
        )
        head = read_response(conn)
    assert head.startswith("HTTP/1.1 413 "), head
    assert f"its Content-Length is {10 << 30}" in head and f"at most {limit} bytes" in head
    assert stored(notes_db) == (0, 0)


def test_a_chunked_body_is_refused_while_it_is_still_arriving(url: str, notes_db: Database) -> None:
    """No Content-Length: the limit is counted on the stream, and the 413 is answered
    while the client has not finished (it never does here), not after reading it all."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(
            b"POST /notes HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for _ in range(MAX_BODY // 1000 + 2):
            conn.sendall(b"3e8\r\n" + b" " * 1000 + b"\r\n")  # 1000-byte chunks, no last one
        head = read_response(conn)
    assert head.startswith("HTTP/1.1 413 "), head
    assert "bytes had arrived when it was refused" in head
    assert stored(notes_db) == (0, 0)


@pytest.mark.parametrize("streamed", [False, True], ids=["content-length", "chunked"])
def test_a_body_one_byte_over_is_refused_and_one_at_the_limit_accepted(
    url: str, notes_db: Database, streamed: bool
) -> None:
    over, at = note_body(MAX_BODY + 1, "over"), note_body(MAX_BODY, "at")
    refused = post(url, "/notes", chunks(over) if streamed else over, key="k-over")
    seen = (
        f"{MAX_BODY + 1} bytes had arrived" if streamed else f"its Content-Length is {MAX_BODY + 1}"
    )
    assert_too_large(refused, MAX_BODY, seen)
    assert stored(notes_db) == (0, 0)
    accepted = post(url, "/notes", chunks(at) if streamed else at, key="k-at")
    assert accepted.status_code == 201, accepted.text
    assert [row["entity"] for row in read_ledger(notes_db)] == ["note:at"]


def test_nothing_is_claimed_or_stored_so_the_same_key_runs_later(
    url: str, notes_db: Database
) -> None:
    refused = post(url, "/notes", chunks(note_body(MAX_BODY * 3, "a")), key="same")
    assert refused.status_code == 413
    batch = post(url, BATCH_PATH, chunks(batch_body(MAX_BATCH_BODY + 1)), key="unused")
    assert batch.status_code == 413
    assert stored(notes_db) == (0, 0)
    assert httpx.get(url + "/notes/a").status_code == 404
    # The key was never taken: the same key with a body that fits runs, fresh.
    again = post(url, "/notes", note_body(100, "a"), key="same")
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    assert stored(notes_db) == (1, 1)


def test_the_batch_route_has_its_own_limit(url: str, notes_db: Database) -> None:
    # Over the single-operation limit, under the batch limit: a batch takes it.
    fits = post(url, BATCH_PATH, batch_body(MAX_BATCH_BODY))
    assert fits.status_code == 200, fits.text
    assert [r["status"] for r in fits.json()["results"]] == [201]
    assert_too_large(
        post(url, BATCH_PATH, batch_body(MAX_BATCH_BODY + 1)),
        MAX_BATCH_BODY,
        f"its Content-Length is {MAX_BATCH_BODY + 1}",
    )
    assert_too_large(
        post(url, BATCH_PATH, chunks(batch_body(MAX_BATCH_BODY + 1))),
        MAX_BATCH_BODY,
        "bytes had arrived",
    )
    assert stored(notes_db) == (1, 1)


def test_a_batch_limit_below_the_single_operation_limit_is_refused(notes_db: Database) -> None:
    """An operation the single route accepts must fit in a batch of one, or a client that
    splits a refused batch down to it would dead-letter it on the batch route's 413."""
    intake = Intake(notes_db)
    intake.add_operation("POST", "/notes", create_note)
    with pytest.raises(ConfigurationError, match=r"max_batch_body \(5000\) must be at least"):
        BodyLimits(max_body=20_000, max_batch_body=5000)
    create_app(intake, limited(5000, 5000), purge_interval=None)  # equal: fine


def test_a_single_operations_413_is_a_permanent_failure_for_the_client(url: str) -> None:
    refused = post(url, "/notes", note_body(MAX_BODY + 1))
    outcome = classify(refused.status_code, refused.headers, refused.json(), now=time.time())
    assert outcome.kind is ReplyKind.PERMANENT and "at most 4000 bytes" in outcome.reason


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2MiB", None])
@pytest.mark.parametrize("name", ["max_body", "max_batch_body"])
def test_a_limit_that_is_not_a_positive_number_of_bytes_is_refused(
    tmp_path: Path, name: str, value: Any
) -> None:
    from pigeon.storage.server import open_server_db

    notes_db = open_server_db(tmp_path / "server.db")
    try:
        with pytest.raises(ConfigurationError, match=f"{name} must be a positive number"):
            create_notes_app(notes_db, ServerOptions(limits=BodyLimits(**{name: value})))
    finally:
        notes_db.close()


def test_the_defaults_leave_room_above_the_edge_payload_limit() -> None:
    edge_limit = QueueOptions().max_payload_bytes
    assert 2 * edge_limit <= DEFAULT_MAX_BODY
    assert DEFAULT_MAX_BATCH_BODY >= 8 * DEFAULT_MAX_BODY


def test_the_openapi_document_lists_413_and_states_the_limits(notes_db: Database) -> None:
    app = create_notes_app(notes_db, limited(1234, 56789), purge_interval=None)
    with live_server(app) as base:
        spec = httpx.get(base + "/pigeon/v1/openapi.json").json()
    validate(spec)
    assert spec["x-pigeon-limits"]["max_body_bytes"] == 1234
    assert spec["x-pigeon-limits"]["max_batch_body_bytes"] == 56789
    writes = [
        operation
        for ops in spec["paths"].values()
        for operation in ops.values()
        if operation.get("x-pigeon-idempotent")
    ]
    assert writes
    for operation in writes:
        assert "1234 bytes" in operation["responses"]["413"]["description"]
        assert "1234" in operation["requestBody"]["description"]
    batch = spec["paths"][BATCH_PATH]["post"]
    assert "56789 bytes" in batch["responses"]["413"]["description"]
    assert "1234 bytes" in spec["info"]["description"]


def test_a_batch_over_the_servers_limit_is_split_by_the_client_and_all_delivered(
    tmp_path: Path, notes_db: Database
) -> None:
    """The transport halves a batch refused with 413 until the halves fit: every
    operation is applied once, in order, and none is dead-lettered."""
    app = create_notes_app(notes_db, limited(6000, 6000), purge_interval=None)
    bodies = [{"id": f"n{n}", "text": "x" * 1000} for n in range(12)]
    with live_server(app) as base:
        keys, statuses = delivered_in_batches(base, tmp_path / "edge.db", bodies)
    assert statuses[0] == 413 and statuses.count(200) >= 2
    assert [row["idempotency_key"] for row in read_ledger(notes_db)] == keys


PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]


def test_pigeon_serve_passes_the_limits_to_the_app(tmp_path: Path) -> None:
    proc = processes.spawn(
        [
            *PIGEON,
            "serve",
            "--db",
            str(tmp_path / "server.db"),
            "--port",
            "0",
            "--max-body",
            "500",
            "--max-batch-body",
            "900",
            "--allow-anonymous",  # the writes below carry no token
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("pigeon serving on http://"), line
        base = line.split()[3]
        until_answers(base + "/pigeon/v1/openapi.json", proc=proc)
        spec = httpx.get(base + "/pigeon/v1/openapi.json").json()
        assert spec["x-pigeon-limits"]["max_body_bytes"] == 500
        assert spec["x-pigeon-limits"]["max_batch_body_bytes"] == 900
        assert_too_large(post(base, "/notes", note_body(501)), 500, "Content-Length is 501")
        assert post(base, "/notes", note_body(500)).status_code == 201
        assert_too_large(post(base, BATCH_PATH, batch_body(901)), 900, "Content-Length is 901")
        assert post(base, BATCH_PATH, batch_body(900)).status_code == 200
    finally:
        processes.stop(proc)


@pytest.mark.parametrize("option", ["--max-body", "--max-batch-body"])
def test_pigeon_serve_refuses_a_limit_below_one_byte(tmp_path: Path, option: str) -> None:
    notes_db = tmp_path / "server.db"
    result = processes.run(
        [*PIGEON, "serve", "--db", str(notes_db), "--port", "0", option, "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and f"Invalid value for '{option}'" in result.stderr
    assert not notes_db.exists()


def test_pigeon_serve_refuses_a_batch_limit_below_the_single_operation_limit(
    tmp_path: Path,
) -> None:
    notes_db = tmp_path / "server.db"
    args = ["--max-body", "5000", "--max-batch-body", "4000"]
    result = processes.run(
        [*PIGEON, "serve", "--db", str(notes_db), "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "must be at least --max-body" in result.stderr
    assert not notes_db.exists()
