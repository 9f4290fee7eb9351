"""Every batch route that runs on an event loop reads the batch (up to 16 MiB: tens of
milliseconds of decoding) and writes its answer off that loop: ``pigeon serve``'s and the
FastAPI integration's. The FastAPI one decoded and answered on the loop, where no other
request of the process was answered meanwhile. Django's batch view is a plain view: no
loop to hold up.

Each case holds the reading (``read_batch``), the FastAPI route's encoding of each
operation's body for the application's route (``encoded_bodies``: one body may be most of
the 16 MiB) or the writing (``results_json``) of one batch until a second request of the
same process has been answered: on the loop, that request never is, and the test fails on
its timeout. ``pigeon serve`` applies a small batch sure to be short on its loop by design
(`pigeon.server.on_loop`): its batch here is over that bound, as a 16 MiB one is."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from pigeon.core.wire import BATCH_PATH, HEALTH_PATH
from pigeon.integrations.fastapi import batch as fastapi_batch
from pigeon.server import app as server_app
from pigeon.server import on_loop
from tests.integrations.served_apps import fastapi_orders, pigeon_serve

ADA = {"Authorization": "Bearer ada.1"}  # the demo stand-in's, and the example's principal


# The app, the module its batch route looks its helpers up in, and a read that never
# touches the batch route's work.
APPS: dict[str, tuple[Callable[[Path], Any], Any, str]] = {
    "pigeon serve": (pigeon_serve, server_app, HEALTH_PATH),
    "fastapi": (fastapi_orders, fastapi_batch, "/openapi.json"),
}


CASES = [(name, work) for name in sorted(APPS) for work in ("read_batch", "results_json")]
CASES.append(("fastapi", "encoded_bodies"))


@pytest.mark.parametrize(("name", "work"), CASES)
def test_a_batch_being_read_or_answered_holds_up_no_other_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, work: str
) -> None:
    serve, module, probe = APPS[name]
    original = getattr(module, work)
    entered, released = threading.Event(), threading.Event()

    def held(*args: Any) -> Any:
        entered.set()
        released.wait(30)  # until the other request is answered: on the loop, never
        return original(*args)

    monkeypatch.setattr(module, work, held)
    note: dict[str, Any] = {"id": "n1"}
    if module is server_app:
        note["text"] = "x" * on_loop.MAX_BYTES
    ops = [{"idempotency_key": "k1", "method": "POST", "path": "/notes", "body": note}]
    with serve(tmp_path) as url, ThreadPoolExecutor(1) as pool:
        sent = pool.submit(
            httpx.post, url + BATCH_PATH, json={"operations": ops}, headers=ADA, timeout=60
        )
        assert entered.wait(30), f"the batch never reached {work}"
        try:
            other = httpx.get(url + probe, headers=ADA, timeout=5)
        finally:
            released.set()
        assert other.status_code == 200
        reply = sent.result()
    assert reply.status_code == 200, reply.text
    assert reply.json()["results"][0]["status"] == 201
