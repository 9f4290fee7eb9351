"""On a real uvicorn process over loopback with real httpx: fifty duplicates at once, and
the server SIGKILLed between its commit and its answer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

from tests import processes
from tests.integrations.orders_app import counts
from tests.waiting import until_answers


@contextmanager
def orders_server(
    url: str, mode: str, die_on: str | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    args = [sys.executable, "-m", "tests.integrations.orders_server", url, mode]
    proc = processes.spawn(
        [*args, *([die_on] if die_on else [])], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("port "), line
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        until_answers(base + "/openapi.json", proc=proc)
        yield proc, base
    finally:
        processes.stop(proc, grace=0)


def test_fifty_duplicates_make_one_row_one_job_and_identical_answers(
    app_db: str, mode: str
) -> None:
    with orders_server(app_db, mode) as (_, base):

        def send(_: int) -> httpx.Response:
            with httpx.Client(base_url=base, timeout=60) as client:
                return client.post(
                    "/orders", json={"item": "tea"}, headers={"Idempotency-Key": "same"}
                )

        with ThreadPoolExecutor(max_workers=50) as pool:
            responses = list(pool.map(send, range(50)))
    statuses = {r.status_code for r in responses}
    assert statuses <= {201, 409}, statuses
    created = [r for r in responses if r.status_code == 201]
    assert len({r.content for r in created}) == 1
    assert sum(r.headers.get("idempotent-replayed") != "true" for r in created) == 1
    assert all(r.headers["retry-after"] for r in responses if r.status_code == 409)
    assert counts(app_db) == {"orders": 1, "jobs": 1, "claims": 1}


@pytest.mark.chaos
def test_killed_after_commit_before_the_answer_the_resend_replays(app_db: str, mode: str) -> None:
    body, key = {"item": "survives"}, {"Idempotency-Key": "k"}
    with orders_server(app_db, mode, die_on="k") as (proc, base):
        with pytest.raises(httpx.TransportError):
            httpx.post(base + "/orders", json=body, headers=key, timeout=30)
        assert proc.wait(30) == -9
    assert counts(app_db) == {"orders": 1, "jobs": 1, "claims": 1}  # committed, unanswered
    with orders_server(app_db, mode) as (_, base):
        again = httpx.post(base + "/orders", json=body, headers=key, timeout=30)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["item"] == "survives"
    assert counts(app_db) == {"orders": 1, "jobs": 1, "claims": 1}
