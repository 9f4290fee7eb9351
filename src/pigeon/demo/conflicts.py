"""``pigeon demo --conflicts``: two offline devices edit the same notes, then reconnect.

A real server (uvicorn on loopback, the notes app with an LWW and a CRDT collection), two
devices with their own durable queues and resolvers. The phone's clock is two hours fast.
Both devices first see the same five entities, go offline, edit each of them, and sync:
the laptop first, then the phone. Each entity's type picks its strategy; the report says
what each strategy did and what the server holds afterwards.
"""

from __future__ import annotations

import base64
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Text

from pigeon.core.retry import RetryPolicy
from pigeon.demo.processes import serve_in_thread
from pigeon.edge.merge import SEPARATOR, notes_merge
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.reference.notes import create_notes_app
from pigeon.storage.server import open_server_db
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.resolver import ConflictPolicy, ConflictResolver, Strategy

POLICIES: dict[str, Strategy | ConflictPolicy] = {
    "card": Strategy.FIELD_MERGE,
    "note": ConflictPolicy(Strategy.CUSTOM, merge=notes_merge),
    "draft": Strategy.USER,
    "lww-note": Strategy.LWW,
    "doc": Strategy.CRDT,
}
FAST_RETRY = RetryPolicy(base=0.02, factor=2.0, cap=0.2, max_attempts=20)
PHONE_SKEW = 2 * 3600.0  # the phone's clock is two hours fast


@dataclass
class Row:
    entity: str
    strategy: str
    phone: Any
    laptop: Any
    server: Any = None
    outcome: str = ""


@dataclass
class Device:
    name: str
    queue: OfflineQueue
    resolver: ConflictResolver
    transport: HttpTransport
    engine: SyncEngine

    def sync(self) -> None:
        self.engine.drain(timeout=20)


@contextmanager
def _server(db_path: Path) -> Iterator[str]:
    db = open_server_db(db_path)
    app = create_notes_app(
        db, purge_interval=None, lww_collections=["lww-notes"], crdt_collections=["docs"]
    )
    try:
        with serve_in_thread(app, log_level="error") as url:
            yield url
    finally:
        db.close()


def _device(name: str, path: Path, url: str, now: Callable[[], float]) -> Device:
    queue = OfflineQueue(path, QueueOptions(retry_policy=FAST_RETRY), now=now)
    resolver = ConflictResolver(queue, POLICIES)
    transport = HttpTransport(url, token=f"demo.{name}", batch=True, headers=resolver.headers)
    engine = SyncEngine(queue, transport, connectivity=ManualMonitor(), resolver=resolver)
    return Device(name, queue, resolver, transport, engine)


def _doc_update(client_id: int, word: str, state: str | None) -> tuple[Doc[Any], str]:
    doc: Doc[Any] = Doc(client_id=client_id)
    if state:
        doc.apply_update(base64.b64decode(state))
    before = doc.get_state()
    text = doc.get("body", type=Text)
    text += word
    return doc, base64.b64encode(doc.get_update(before)).decode()


def _render(state: str) -> str:
    doc: Doc[Any] = Doc()
    doc.apply_update(base64.b64decode(state))
    return str(doc.get("body", type=Text))


def _marked(value: Any) -> bool:
    """Whether a merged state holds rival texts kept side by side (`notes_merge`)."""
    values = value.values() if isinstance(value, dict) else [value]
    return any(isinstance(v, str) and SEPARATOR in v for v in values)


def run_conflicts_demo(workdir: Path | None = None) -> list[Row]:
    """Run the scenario; returns one row per entity (what each device wrote, the result)."""
    with tempfile.TemporaryDirectory(prefix="pigeon-conflicts-") as tmp:
        base = workdir or Path(tmp)
        with _server(base / "server.db") as url:
            phone = _device("phone", base / "phone.db", url, lambda: time.time() + PHONE_SKEW)
            laptop = _device("laptop", base / "laptop.db", url, time.time)
            try:
                return _scenario(url, phone, laptop)
            finally:
                for device in (phone, laptop):
                    device.engine.stop()
                    device.transport.close()
                    device.queue.close()


def _scenario(url: str, phone: Device, laptop: Device) -> list[Row]:
    shared: dict[str, dict[str, Any]] = {
        "card:groceries": {"title": "Groceries", "colour": "blue", "done": False},
        "note:ideas": {"body": "a garden"},
        "draft:letter": {"body": "Dear Ann,"},
    }
    for entity, data in shared.items():  # on the notes API: the client resolves
        phone.queue.enqueue(
            "create", entity, {"id": entity.split(":")[1], **data}, endpoint="/notes"
        )
    phone.queue.enqueue("update", "lww-note:status", {"text": "at home"})
    _, first_words = _doc_update(1, "plan: ", None)
    phone.queue.enqueue("update", "doc:plan", {"update": first_words}, method="PATCH")
    phone.sync()
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer demo.laptop"}) as http:
        for entity in shared:  # the laptop reads them: its base for a later merge
            got = http.get(f"/notes/{entity.split(':')[1]}")
            laptop.queue.set_base_version(entity, got.headers["etag"].strip('"'))
            laptop.resolver.store.remember(
                entity, got.headers["etag"].strip('"'), got.json()["data"]
            )
        plan_state = http.get("/docs/plan").json()["data"]["state"]

    # Offline, both devices edit every entity.
    rows = [
        Row("card:groceries", "field merge", {"title": "Food"}, {"colour": "red", "done": True}),
        Row("note:ideas", "custom 3-way", {"body": "a garden, a pond"}, {"body": "a garden, bees"}),
        Row("draft:letter", "user (kept both)", {"body": "Dear Ann, thanks!"}, {"body": "Hi Ann,"}),
        Row("lww-note:status", "last write wins", {"text": "on the train"}, {"text": "at work"}),
        Row("doc:plan", "CRDT", "types 'seeds '", "types 'shed '"),
    ]
    card = shared["card:groceries"]
    phone.queue.enqueue(
        "update",
        "card:groceries",
        {**card, "title": "Food"},
        endpoint="/notes/groceries",
        method="PUT",
    )
    laptop.queue.enqueue(
        "update",
        "card:groceries",
        {**card, "colour": "red", "done": True},
        endpoint="/notes/groceries",
        method="PUT",
    )
    phone.queue.enqueue(
        "update", "note:ideas", rows[1].phone, endpoint="/notes/ideas", method="PUT"
    )
    laptop.queue.enqueue(
        "update", "note:ideas", rows[1].laptop, endpoint="/notes/ideas", method="PUT"
    )
    phone.queue.enqueue(
        "update", "draft:letter", rows[2].phone, endpoint="/notes/letter", method="PUT"
    )
    laptop.queue.enqueue(
        "update", "draft:letter", rows[2].laptop, endpoint="/notes/letter", method="PUT"
    )
    # The phone writes its status first, the laptop a moment later; the phone's clock says
    # its write is two hours newer. The server corrects for that: the laptop's is the last,
    # so the phone's, arriving after it, loses.
    phone.queue.enqueue("update", "lww-note:status", rows[3].phone)
    time.sleep(0.05)
    laptop.queue.enqueue("update", "lww-note:status", rows[3].laptop)
    phone_doc, phone_words = _doc_update(1, "seeds ", plan_state)
    laptop_doc, laptop_words = _doc_update(2, "shed ", plan_state)
    phone.queue.enqueue("update", "doc:plan", {"update": phone_words}, method="PATCH")
    laptop.queue.enqueue("update", "doc:plan", {"update": laptop_words}, method="PATCH")

    # Back online: the laptop syncs first, then the phone, whose edits meet the laptop's.
    laptop.sync()
    phone.sync()
    for held in phone.resolver.store.records("held"):  # the user chooses: keep both
        phone.resolver.store.resolve(held.id, "both")
    phone.sync()

    with httpx.Client(base_url=url, headers={"Authorization": "Bearer demo.laptop"}) as http:
        for row in rows:
            kind, _, ident = row.entity.partition(":")
            path = {"lww-note": "/lww-notes", "doc": "/docs"}.get(kind, "/notes")
            data = http.get(f"{path}/{ident}").json()["data"]
            row.server = _render(data["state"]) if kind == "doc" else data
        copies = [n for n in http.get("/notes").json()["notes"] if "conflicted-copy" in n["id"]]
    outcomes = {
        r.entity: r
        for d in (laptop, phone)
        for r in d.resolver.store.records()
        if r.outcome != "superseded"
    }
    for row in rows:
        record = outcomes.get(row.entity)
        if row.entity == "doc:plan":
            row.outcome = "merged on the server: both devices' words, one document"
        elif record is None:
            row.outcome = "no conflict"
        elif record.outcome == "resolved":
            names = ", ".join(c["id"] for c in copies)
            row.outcome = f"held for the user, who kept both: the phone's text is now {names}"
        elif record.outcome == "lost":
            row.outcome = (
                "the laptop wrote last (the phone's clock, 2 h fast, was corrected): "
                "the phone's write lost, acknowledged and recorded"
            )
        elif record.outcome == "merged" and _marked(row.server):
            # notes_merge keeps both rival edits of one field, marked: not a silent merge.
            row.outcome = (
                "merged, both rival texts kept and marked for the user to tidy; sent again "
                f"against version {record.remote_version}"
            )
        else:
            row.outcome = f"{record.outcome}: sent again against version {record.remote_version}"
    for doc in (phone_doc, laptop_doc):  # each device applies the server's merged state
        doc.apply_update(base64.b64decode(_doc_state(url)))
    return rows


def _doc_state(url: str) -> str:
    reply = httpx.get(url + "/docs/plan", headers={"Authorization": "Bearer demo.phone"})
    state: str = reply.json()["data"]["state"]
    return state
