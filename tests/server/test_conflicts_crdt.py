"""CRDT documents: Yjs updates merged on the server converge whatever the delivery order."""

from __future__ import annotations

import base64
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text

from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import InvalidOperation
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference.crdt import decode, encode, merge
from pigeon.reference.notes import create_notes_app
from pigeon.storage.base import Database
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine

from .conftest import NotesClient, TestClient

_keys = itertools.count()


def edits(client_id: int, words: list[str]) -> list[bytes]:
    """One replica typing ``words``: one Yjs update per word."""
    doc: Doc[Any] = Doc(client_id=client_id)
    text = doc.get("body", type=Text)
    updates = []
    for word in words:
        before = doc.get_state()
        text += word
        updates.append(bytes(doc.get_update(before)))
    return updates


def render(state: bytes) -> str:
    doc: Doc[Any] = Doc()
    doc.apply_update(state)
    return str(doc.get("body", type=Text))


@pytest.fixture
def client(notes_client: NotesClient) -> TestClient:
    return notes_client(crdt_collections=["docs"])


def push(client: TestClient, update: bytes) -> Any:
    return client.patch(
        "/docs/d",
        json={"update": encode(update)},
        headers={"Idempotency-Key": f"crdt-{next(_keys)}"},
    )


def test_three_replicas_converge_on_the_server_in_any_order_with_duplicates(
    client: TestClient,
) -> None:
    a, b, c = edits(1, ["a1 ", "a2 "]), edits(2, ["b1 "]), edits(3, ["c1 ", "c2 "])
    # Interleaved, reordered within nothing (a replica's own updates keep their order in the
    # queue) but duplicated: b1 arrives twice under two keys.
    for update in [c[0], a[0], b[0], c[1], b[0], a[1]]:
        reply = push(client, update)
        assert reply.status_code in (200, 201) and reply.json()["outcome"] == "merged"
    served = client.get("/docs/d").json()["data"]["state"]
    expected = merge(*a, *b, *c)
    assert render(base64.b64decode(served)) == render(expected)
    assert sorted(render(expected).split()) == ["a1", "a2", "b1", "c1", "c2"]
    # The duplicate changed nothing: 5 distinct updates, 5 versions.
    assert client.get("/docs/d").headers["etag"] == '"5"'


def test_a_client_that_applies_the_served_state_holds_everything(client: TestClient) -> None:
    mine = edits(7, ["mine "])
    theirs = edits(8, ["theirs "])
    push(client, theirs[0])
    reply = push(client, mine[0]).json()
    replica: Doc[Any] = Doc(client_id=7)
    replica.apply_update(mine[0])
    replica.apply_update(base64.b64decode(reply["state"]))
    assert sorted(str(replica.get("body", type=Text)).split()) == ["mine", "theirs"]


def test_a_bad_update_is_refused_and_nothing_is_stored(client: TestClient) -> None:
    for body in ({"update": "%%%"}, {"update": encode(b"\xff\xfe")}, {"nope": 1}, [1]):
        reply = client.patch("/docs/d", json=body, headers={"Idempotency-Key": f"bad-{body!r}"})
        assert reply.status_code == 400, body
    assert client.get("/docs/d").status_code == 404
    with pytest.raises(InvalidOperation, match="base64"):
        decode("not base64!")


replica_edits = st.lists(st.text("xyz ", min_size=1, max_size=3), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(replica_edits, replica_edits, replica_edits),
    st.randoms(use_true_random=False),
    st.lists(st.integers(0, 8), max_size=4),
)
def test_crdt_convergence_under_interleaving_reordering_and_duplicates(
    words: tuple[list[str], list[str], list[str]], rng: Any, duplicates: list[int]
) -> None:
    updates = [u for n, w in enumerate(words) for u in edits(n + 1, w)]
    expected = render(merge(*updates))
    # Three servers (or replicas) receive the same updates in different orders, with repeats.
    finals = []
    for _ in range(3):
        delivery = updates + [updates[i % len(updates)] for i in duplicates]
        rng.shuffle(delivery)
        state = b""
        for update in delivery:
            state = merge(state, update) if state else merge(update)
        finals.append(render(state))
    assert finals == [expected] * 3
    assert sorted(expected.replace(" ", "")) == sorted(
        "".join(w for ws in words for w in ws).replace(" ", "")
    )


def test_updates_made_offline_on_one_device_all_arrive(tmp_path: Path, notes_db: Database) -> None:
    # Each is a PATCH: the queue never folds one into the next, as it would PUTs to the
    # same document (the later replacing the earlier), which lost every update but the last.
    with (
        OfflineQueue(tmp_path / "edge.db") as queue,
        InProcessTransport(
            create_notes_app(notes_db, purge_interval=None, crdt_collections=["docs"])
        ) as transport,
    ):
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor(False))
        queue.enqueue("create", "doc:d", {"id": "d", "update": encode(edits(1, ["one "])[0])})
        for update in edits(1, ["one ", "two ", "three "])[1:]:
            queue.enqueue("update", "doc:d", {"update": encode(update)}, method="PATCH")
        assert len(queue.pending) == 3  # nothing folded
        engine.connectivity.set_online(True)
        assert engine.drain(timeout=10)
        got = transport.client.get("/docs/d").json()["data"]["state"]
    assert render(base64.b64decode(got)) == "one two three "
