"""On a real uvicorn over loopback with real httpx: concurrency and crash cases."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.intake import ClaimMode
from pigeon.server.options import IntakeOptions, ServerOptions
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import until_answers

from .conftest import live_server

HERE = Path(__file__).parent


@pytest.mark.parametrize("claim_mode", ["inline", "separate"])
@pytest.mark.parametrize("in_progress_wait", [0.0, 20.0])
def test_fifty_concurrent_requests_with_one_key_make_one_effect_and_identical_bodies(
    notes_db: Database, claim_mode: ClaimMode, in_progress_wait: float
) -> None:
    options = IntakeOptions(claim_mode=claim_mode, in_progress_wait=in_progress_wait)
    app = create_notes_app(notes_db, ServerOptions(intake=options), purge_interval=None)
    with live_server(app) as url:

        def send(_: int) -> httpx.Response:
            with httpx.Client(base_url=url, timeout=30) as client:
                return client.post(
                    "/notes", json={"id": "n1", "title": "once"}, headers={"Idempotency-Key": "k"}
                )

        with ThreadPoolExecutor(max_workers=50) as pool:
            responses = list(pool.map(send, range(50)))
    created = [r for r in responses if r.status_code == 201]
    if in_progress_wait:  # opted in: duplicates wait for the original, then replay it
        assert len(created) == 50
    else:  # the contract: 409 + Retry-After while the key is in progress
        assert {r.status_code for r in responses} <= {201, 409}
        assert all(r.headers["retry-after"] for r in responses if r.status_code == 409)
    assert len({r.content for r in created}) == 1
    assert sum(r.headers.get("idempotent-replayed") != "true" for r in created) == 1
    assert len(read_ledger(notes_db)) == 1


def test_two_keys_with_identical_bodies_over_http_are_two_effects(notes_db: Database) -> None:
    with (
        live_server(create_notes_app(notes_db, purge_interval=None)) as url,
        httpx.Client(base_url=url) as client,
    ):
        for key in ("k1", "k2"):
            assert (
                client.post("/notes", json={"t": 1}, headers={"Idempotency-Key": key}).status_code
                == 201
            )
        assert len(client.get("/notes").json()["notes"]) == 2
    assert len(read_ledger(notes_db)) == 2


@contextmanager
def crashing_server(
    path: Path | str, die_on: str | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    args = [sys.executable, str(HERE / "crashing_server.py"), str(path)]
    proc = processes.spawn(
        [*args, *([die_on] if die_on else [])], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("port "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        until_answers(url + "/pigeon/v1/health", proc=proc)
        yield proc, url
    finally:
        processes.stop(proc, grace=0)


@pytest.mark.chaos
def test_killed_after_commit_before_response_then_the_resend_replays(server_db_url: str) -> None:
    path = server_db_url
    open_server_db(path).close()
    single = {"id": "n1", "title": "survives"}
    ops = [
        {
            "id": f"op{i}",
            "idempotency_key": f"b{i}",
            "method": "POST",
            "path": "/notes",
            "body": {"id": f"b{i}"},
        }
        for i in range(3)
    ]
    with crashing_server(path, die_on="k") as (proc, url):
        with pytest.raises(httpx.TransportError):
            httpx.post(url + "/notes", json=single, headers={"Idempotency-Key": "k"}, timeout=10)
        assert proc.wait(10) == -9
    with crashing_server(path, die_on="b1") as (proc, url):
        with pytest.raises(httpx.TransportError):
            httpx.post(url + "/pigeon/v1/batch", json={"operations": ops}, timeout=10)
        assert proc.wait(10) == -9
    with crashing_server(path) as (_, url):
        again = httpx.post(url + "/notes", json=single, headers={"Idempotency-Key": "k"})
        batch = httpx.post(url + "/pigeon/v1/batch", json={"operations": ops}).json()["results"]
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["data"] == {"title": "survives"}
    assert [(r["status"], r["replayed"]) for r in batch] == [(201, True)] * 3
    notes_db = open_server_db(path)
    try:
        assert [e["idempotency_key"] for e in read_ledger(notes_db)] == ["k", "b0", "b1", "b2"]
    finally:
        notes_db.close()
