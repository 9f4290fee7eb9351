"""Two writes of one note at the same moment on PostgreSQL, where intake requests run side
by side (SQLite's single writer orders them whole): ``If-Match`` must still refuse the
second, and a merge patch must still merge into the latest data."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from pycrdt import Doc, Text

from pigeon.core.clock import HLCTimestamp
from pigeon.reference.crdt import decode, encode
from pigeon.reference.notes import create_notes_app
from pigeon.storage.base import Database
from tests.databases import lock_waiters
from tests.waiting import wait_for

from .conftest import live_server


def _both_blocked_then_release(pg_url: str, send: Any, requests: list[Any]) -> list[Any]:
    """Hold the note's row lock from outside, let every request read the note and queue
    on it, then let go: the requests' reads all happen before any of their writes."""
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT 1 FROM ref_notes WHERE id = '1' FOR UPDATE")
        with ThreadPoolExecutor(len(requests)) as pool:
            futures = [pool.submit(send, *r) for r in requests]

            def queued() -> bool:
                assert not any(f.done() for f in futures), [f.result().text for f in futures]
                return lock_waiters(pg_url) >= len(requests)

            wait_for(queued, 10, "the requests to queue on the note")
            holder.rollback()
            return [f.result() for f in futures]


def test_two_writes_with_the_same_if_match_one_wins_one_gets_412(pg: Database, pg_url: str) -> None:
    with (
        live_server(create_notes_app(pg, purge_interval=None)) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        assert client.post("/notes", json={"id": "1", "t": 0}, headers={"Idempotency-Key": "c"})

        def send(key: str, body: Any) -> httpx.Response:
            headers = {"Idempotency-Key": key, "If-Match": '"1"'}
            return client.put("/notes/1", json=body, headers=headers)

        replies = _both_blocked_then_release(pg_url, send, [("a", {"t": "a"}), ("b", {"t": "b"})])
        assert sorted(r.status_code for r in replies) == [200, 412], [r.text for r in replies]
        [won] = [r for r in replies if r.status_code == 200]
        assert client.get("/notes/1").json()["data"] == won.json()["data"]
        assert client.get("/notes/1").json()["version"] == 2


def test_two_concurrent_merge_patches_both_land(pg: Database, pg_url: str) -> None:
    with (
        live_server(create_notes_app(pg, purge_interval=None)) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        assert client.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "c"})

        def send(key: str, body: Any) -> httpx.Response:
            return client.patch("/notes/1", json=body, headers={"Idempotency-Key": key})

        replies = _both_blocked_then_release(pg_url, send, [("a", {"x": 1}), ("b", {"y": 2})])
        assert [r.status_code for r in replies] == [200, 200]
        note = client.get("/notes/1").json()
        assert (note["version"], note["data"]) == (3, {"x": 1, "y": 2})


@pytest.mark.parametrize("collection", ["lww-notes", "docs"])
def test_two_first_writes_of_a_new_resource_are_both_settled(
    pg: Database, pg_url: str, collection: str
) -> None:
    """Two devices write a resource the server has not seen yet, at once: the second
    insert meets the first's row. It must be settled (LWW: by clock; CRDT: merged) like
    any write, not fail with 500 on the primary key and send the device into backoff."""
    app = create_notes_app(
        pg, purge_interval=None, lww_collections=["lww-notes"], crdt_collections=["docs"]
    )
    now_ms = int(time.time() * 1000)

    def body(device: str) -> Any:
        if collection == "lww-notes":
            return {"text": device}
        doc = Doc()
        doc["t"] = Text()
        doc["t"] += device
        return {"update": encode(doc.get_update())}

    with live_server(app) as url, httpx.Client(base_url=url, timeout=30) as client:

        def send(device: str, wall: int) -> httpx.Response:
            headers = {
                "Idempotency-Key": device,
                "X-Pigeon-Clock": HLCTimestamp(wall, 0, device).encode(),
            }
            method = "PUT" if collection == "lww-notes" else "PATCH"
            return client.request(method, f"/{collection}/r", json=body(device), headers=headers)

        with psycopg.connect(pg_url) as holder:
            # An uncommitted row with the same key: both requests' inserts queue behind it.
            holder.execute(
                "INSERT INTO ref_resources (principal, collection, id, version, data, deleted, "
                "clock, raw_clock, created_at, updated_at) "
                "VALUES ('anonymous', %s, 'r', 1, '{}', 0, 'c', 'c', 0, 0)",
                (collection,),
            )
            with ThreadPoolExecutor(2) as pool:
                futures = [pool.submit(send, "d1", now_ms - 10), pool.submit(send, "d2", now_ms)]
                wait_for(lambda: lock_waiters(pg_url) >= 2, 10, "both requests to queue on the row")
                holder.rollback()
                replies = [f.result() for f in futures]
        assert sorted(r.status_code for r in replies) == [200, 201], [r.text for r in replies]
        current = client.get(f"/{collection}/r").json()
    if collection == "lww-notes":
        # The greater clock, whichever came first (if it did, the older one lost: version 1).
        assert current["data"] == {"text": "d2"}
        outcomes = [r.json()["outcome"] for r in replies]
        assert sorted(outcomes) in (["created", "won"], ["created", "lost"])
    else:
        assert current["version"] == 2
        doc = Doc()
        doc["t"] = Text()
        doc.apply_update(decode(current["data"]["state"]))
        assert sorted(str(doc["t"])) == sorted("d1d2")
