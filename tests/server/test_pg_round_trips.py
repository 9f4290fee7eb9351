"""On PostgreSQL one POST /notes costs at most two round trips and the COMMIT's: BEGIN
travels with the claim, the savepoint with the handler's statement (the note and its
ledger row in one), and the stored answer and the savepoint's release with the COMMIT. A
PUT or DELETE of a note costs the same (its lock, If-Match check, write and ledger row in
one statement), and a PATCH (its locked read with the savepoint, its write and ledger row
with the COMMIT). A batch costs the same number whatever its size, three for creates
(its keys read with BEGIN, the notes, the ledger rows and the claims with the COMMIT).
Counted on the wire (tests/pgwire.py), the app warmed first: psycopg prepares a statement
the sixth time it runs it, a round trip of its own once per connection, which is not the
request's."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests.pgwire import Counts, RoundTrips
from tests.server.conftest import TestClient

pytestmark = pytest.mark.postgres

SINGLE_BOUND = 3  # two round trips, and the COMMIT's
# A batch of creates: BEGIN and its keys read, the notes, and the ledger rows and the
# claims with the COMMIT.
BATCH_BOUND = 3
WARM = 8

# A request made ready (its note created first, uncounted): method, path, client kwargs.
Request = tuple[str, str, dict[str, Any]]


@pytest.fixture
def relay(pg_url: str) -> Iterator[RoundTrips]:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    counting = RoundTrips((str(info.get("host", "127.0.0.1")), int(info.get("port", 5432))))
    yield counting
    counting.close()


@pytest.fixture
def relayed_db(pg_url: str, relay: RoundTrips) -> Iterator[Database]:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    user, name = info.get("user", "postgres"), info["dbname"]
    db = open_server_db(f"postgresql://{user}@127.0.0.1:{relay.port}/{name}")
    yield db
    db.close()


def _note() -> tuple[dict[str, str], dict[str, str]]:
    key = uuid.uuid4().hex
    return {"id": key, "title": "shopping list"}, {"Idempotency-Key": key}


def _batch(size: int) -> dict[str, object]:
    ops = [
        {
            "idempotency_key": uuid.uuid4().hex,
            "method": "POST",
            "path": "/notes",
            "body": {"id": uuid.uuid4().hex, "title": "x"},
        }
        for _ in range(size)
    ]
    return {"operations": ops}


def _counted(relay: RoundTrips, client: TestClient, make: Callable[[], Request]) -> Counts:
    for _ in range(WARM):
        method, path, kwargs = make()
        client.request(method, path, **kwargs)
    method, path, kwargs = make()
    with relay.counting() as counted:
        answer = client.request(method, path, **kwargs)
    assert answer.status_code in (200, 201), answer.text
    return counted


def _posted(path: str, make: Callable[[], dict[str, Any]]) -> Callable[[], Request]:
    return lambda: ("POST", path, make())


def _existing(client: TestClient) -> str:
    """The id of a note just made, at version 1."""
    body, headers = _note()
    assert client.post("/notes", json=body, headers=headers).status_code == 201
    return body["id"]


# Each write of an existing note, with the If-Match its check reads.
WRITES: dict[str, dict[str, Any]] = {
    "PUT": {"json": {"title": "groceries"}},
    "PATCH": {"json": {"done": True}},
    "DELETE": {},
}


def _write(client: TestClient, method: str) -> Request:
    """A WRITES request of a note just made."""
    headers = {"Idempotency-Key": uuid.uuid4().hex, "If-Match": '"1"'}
    return method, f"/notes/{_existing(client)}", WRITES[method] | {"headers": headers}


def test_a_single_post_costs_two_round_trips_and_the_commit(
    relayed_db: Database, relay: RoundTrips
) -> None:
    with TestClient(create_notes_app(relayed_db, purge_interval=None)) as client:

        def single() -> dict[str, object]:
            body, headers = _note()
            return {"json": body, "headers": headers}

        counted = _counted(relay, client, _posted("/notes", single))
        assert counted.turns <= SINGLE_BOUND, counted
        # What those round trips did is all there: the note, its ledger row, its answer.
        body, headers = _note()
        assert client.post("/notes", json=body, headers=headers).status_code == 201
        replay = client.post("/notes", json=body, headers=headers)
        assert replay.status_code == 201 and replay.json()["id"] == body["id"]
        assert client.get(f"/notes/{body['id']}").status_code == 200
    assert (
        sum(e["idempotency_key"] == headers["Idempotency-Key"] for e in read_ledger(relayed_db))
        == 1
    )
    with idempotency_store(relayed_db).transaction() as tx:
        claim = idempotency_store(relayed_db).get(tx, "anonymous", headers["Idempotency-Key"])
    assert claim is not None and claim["state"] == "completed" and claim["status"] == 201


@pytest.mark.parametrize("method", ["POST", *sorted(WRITES)])
def test_a_warmed_request_sends_every_statement_with_parameters_prepared(
    relayed_db: Database, relay: RoundTrips, method: str
) -> None:
    # The stored answer that travels with the COMMIT, the write a PATCH defers: each was
    # parsed and planned again by PostgreSQL on every request, 13% of a single POST's time.
    with TestClient(create_notes_app(relayed_db, purge_interval=None)) as client:

        def request() -> Request:
            if method == "POST":
                body, headers = _note()
                return "POST", "/notes", {"json": body, "headers": headers}
            return _write(client, method)

        counted = _counted(relay, client, request)
    assert counted.parsed == 0, counted


def test_a_batch_costs_the_same_round_trips_whatever_its_size(
    relayed_db: Database, relay: RoundTrips
) -> None:
    with TestClient(create_notes_app(relayed_db, purge_interval=None)) as client:
        ten = _counted(relay, client, _posted("/pigeon/v1/batch", lambda: {"json": _batch(10)}))
        hundred = _counted(
            relay, client, _posted("/pigeon/v1/batch", lambda: {"json": _batch(100)})
        )
    assert hundred.turns == ten.turns, (ten, hundred)
    assert hundred.turns <= BATCH_BOUND, hundred


@pytest.mark.parametrize("method", sorted(WRITES))
def test_a_single_write_of_a_note_is_within_its_bound(
    relayed_db: Database, relay: RoundTrips, method: str
) -> None:
    with TestClient(create_notes_app(relayed_db, purge_interval=None)) as client:
        counted = _counted(relay, client, lambda: _write(client, method))
    print(f"{method} /notes/{{id}}: {counted}")
    assert counted.turns <= SINGLE_BOUND, counted
