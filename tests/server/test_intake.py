"""The intake contract, rule by rule, through the ASGI app with a real SQLite file."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.wire import PROBLEM_JSON
from pigeon.reference.notes import create_note, create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.app import create_app
from pigeon.server.idempotency import DAY, IdempotencyPolicy
from pigeon.server.intake import Handler, Intake
from pigeon.server.options import IntakeOptions, ServerOptions
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests.clocks import FakeClock

from .conftest import NotesClient, TestClient, failing_handler

ALICE = {"Authorization": "Bearer alice.token-1"}


@pytest.fixture
def client(notes_client: NotesClient, server_clock: FakeClock) -> TestClient:
    policy = IdempotencyPolicy(lock_timeout=30, response_retention=DAY, claim_retention=7 * DAY)
    return notes_client(ServerOptions(intake=IntakeOptions(policy)), now=server_clock)


def post(client: TestClient, key: str | None, body: Any, **headers: str) -> Any:
    sent = dict(ALICE) | headers
    if key is not None:
        sent["Idempotency-Key"] = key
    return client.post("/notes", json=body, headers=sent)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Idempotency-Key", "")],
        [("Idempotency-Key", "k" * 256)],
        [("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
    ],
    ids=["missing", "empty", "too-long", "two-lines"],
)
def test_a_bad_key_is_refused_with_400_and_nothing_runs(
    client: TestClient, notes_db: Database, headers: list[tuple[str, str]]
) -> None:
    response = client.post("/notes", json={"id": "1"}, headers=[*ALICE.items(), *headers])
    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM_JSON
    assert "Idempotency-Key" in response.json()["detail"]
    assert read_ledger(notes_db) == []
    assert client.get("/notes", headers=ALICE).json() == {"notes": []}


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("PATCH", "/answers", 405), ("GET", "/pigeon/v1/batch", 405), ("POST", "/nope", 404)],
)
def test_an_unknown_route_or_method_is_a_problem_naming_it(
    client: TestClient, method: str, path: str, status: int
) -> None:
    """Every refusal is problem+json (RFC 9457) saying what was wrong, the router's own
    404 and 405 included: a client reads ``type`` and ``detail``, not Starlette's text."""
    reply = client.request(method, path, json={}, headers=ALICE | {"Idempotency-Key": "k"})
    assert reply.status_code == status
    assert reply.headers["content-type"] == PROBLEM_JSON
    problem = reply.json()
    assert problem["status"] == status and path in problem["detail"]
    if status == 405:
        assert method in problem["detail"] and "POST" in reply.headers["allow"]


@pytest.mark.parametrize("depth", [5_000, 990])
def test_json_nested_too_deep_is_a_400_not_a_crash(client: TestClient, depth: int) -> None:
    """json.loads raises RecursionError (not ValueError) past Python's recursion limit, and
    a body just under it still overflowed later, when the fingerprint encoded it deeper in
    the stack: a 500 in plain text, or for a batch a connection reset."""
    deep = "[" * depth + "]" * depth
    headers = ALICE | {"Idempotency-Key": "deep", "Content-Type": "application/json"}
    for path, content in (
        ("/notes", deep),
        ("/pigeon/v1/batch", deep),
        ("/pigeon/v1/batch", '{"operations": [{"body": ' + deep + "}]}"),
    ):
        reply = client.post(path, content=content, headers=headers)
        assert reply.status_code == 400, (path, reply.text[:200])
        assert reply.headers["content-type"] == PROBLEM_JSON
        assert "deep" in reply.json()["detail"]
    # Nesting within the limit is an ordinary operation, alone and in a batch.
    nested = {"id": f"n{depth}", "t": json.loads("[" * 190 + "]" * 190)}
    assert post(client, f"ok{depth}", nested).status_code == 201
    entry = {"idempotency_key": f"ok{depth}", "method": "POST", "path": "/notes", "body": nested}
    reply = client.post("/pigeon/v1/batch", json={"operations": [entry]}, headers=ALICE)
    [replayed] = reply.json()["results"]
    assert (replayed["status"], replayed["replayed"]) == (201, True)


def test_a_principal_too_long_to_scope_a_key_is_refused_401(client: TestClient) -> None:
    """Keys are stored per (principal, key), one index entry. A principal of a few KB
    (here from a bearer token) cannot be indexed by PostgreSQL: every write of it was
    answered 503 "store cannot be reached", for ever (and logged as an outage), where
    SQLite took it. It is the credential that is unusable: 401, on both."""
    for principal in ("p" * 256, os.urandom(4000).hex()):
        token = {"Authorization": f"Bearer {principal}.token"}
        for reply in (
            client.post("/notes", json={"id": "1"}, headers=token | {"Idempotency-Key": "k"}),
            client.post("/pigeon/v1/batch", json={"operations": []}, headers=token),
        ):
            assert reply.status_code == 401, reply.text[:200]
            assert reply.headers["content-type"] == PROBLEM_JSON
            assert f"{len(principal)} characters" in reply.json()["detail"]
    ok = {"Authorization": "Bearer " + "p" * 255 + ".token", "Idempotency-Key": "k"}
    assert client.post("/notes", json={"id": "1"}, headers=ok).status_code == 201


def test_a_replay_returns_the_stored_answer_and_runs_nothing(
    client: TestClient, notes_db: Database
) -> None:
    first = post(client, "k1", {"id": "1", "title": "a", "tags": [1, 2]})
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    # Same request, other key order and spacing: the same fingerprint.
    again = client.post(
        "/notes",
        content=b'{ "tags": [1, 2],   "title": "a", "id": "1" }',
        headers=ALICE | {"Idempotency-Key": "k1", "Content-Type": "application/json"},
    )
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert again.headers["etag"] == first.headers["etag"]
    assert len(read_ledger(notes_db)) == 1


def test_the_same_key_with_another_request_is_422_and_the_original_is_untouched(
    client: TestClient, notes_db: Database
) -> None:
    post(client, "k1", {"id": "1", "title": "a"})
    response = post(client, "k1", {"id": "1", "title": "CHANGED"})
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM_JSON
    assert client.get("/notes/1", headers=ALICE).json()["data"] == {"title": "a"}
    assert post(client, "k1", {"id": "1", "title": "a"}).headers["idempotent-replayed"] == "true"
    assert len(read_ledger(notes_db)) == 1


def test_two_keys_with_identical_bodies_are_two_effects(
    client: TestClient, notes_db: Database
) -> None:
    assert post(client, "k1", {"title": "same"}).status_code == 201
    assert post(client, "k2", {"title": "same"}).status_code == 201
    assert len(client.get("/notes", headers=ALICE).json()["notes"]) == 2
    assert [e["idempotency_key"] for e in read_ledger(notes_db)] == ["k1", "k2"]


def test_keys_are_scoped_by_principal_and_a_refreshed_token_still_replays(
    client: TestClient, notes_db: Database
) -> None:
    first = post(client, "shared-key", {"id": "1", "title": "alice's"})
    refreshed = post(
        client, "shared-key", {"id": "1", "title": "alice's"}, Authorization="Bearer alice.token-2"
    )
    assert refreshed.headers["idempotent-replayed"] == "true"
    assert refreshed.content == first.content
    bob = post(client, "shared-key", {"id": "1", "title": "bob's"}, Authorization="Bearer bob.x")
    assert bob.status_code == 201 and "idempotent-replayed" not in bob.headers
    assert bob.json()["data"] == {"title": "bob's"}
    assert client.get("/notes/1", headers=ALICE).json()["data"] == {"title": "alice's"}
    assert [e["principal"] for e in read_ledger(notes_db)] == ["alice", "bob"]


def test_deterministic_4xx_after_execution_began_is_stored(
    client: TestClient, notes_db: Database
) -> None:
    missing = client.delete("/notes/nope", headers=ALICE | {"Idempotency-Key": "d1"})
    assert missing.status_code == 404
    post(client, "c1", {"id": "nope"})  # now it exists; the stored 404 must not change
    again = client.delete("/notes/nope", headers=ALICE | {"Idempotency-Key": "d1"})
    assert again.status_code == 404 and again.headers["idempotent-replayed"] == "true"
    assert client.get("/notes/nope", headers=ALICE).status_code == 200


def _refused_then_retried(notes_db: Database, server_clock: FakeClock, refuse: Handler) -> Any:
    """POST a note under key "k" through a handler that answers with ``refuse`` the first
    time and creates the note the second. Checks that the refusal left no write and gave
    the key back, and that the retry ran; returns the refused response."""
    intake = Intake(notes_db, now=server_clock)
    calls = {"n": 0}

    def handler(ctx: Any) -> Any:
        calls["n"] += 1
        return refuse(ctx) if calls["n"] == 1 else create_note(ctx)

    intake.add_operation("POST", "/notes", handler)
    with TestClient(create_app(intake, purge_interval=None), raise_server_exceptions=False) as c:
        refused = c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"})
        assert read_ledger(notes_db) == []
        with notes_db.transaction() as tx:
            assert intake.store.get(tx, "anonymous", "k") is None
        retried = c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"})
    assert retried.status_code == 201 and "idempotent-replayed" not in retried.headers
    assert len(read_ledger(notes_db)) == 1
    return refused


@pytest.mark.parametrize("kind", ["raise", "5xx"])
def test_an_exception_or_5xx_rolls_everything_back_and_releases_the_key(
    notes_db: Database, server_clock: FakeClock, kind: str
) -> None:
    assert _refused_then_retried(notes_db, server_clock, failing_handler(kind)).status_code >= 500


@pytest.mark.parametrize("status", [401, 403, 408, 425, 429])
def test_a_not_now_4xx_is_not_stored_and_a_retry_runs(
    notes_db: Database, server_clock: FakeClock, status: int
) -> None:
    # The client retries these with the same key (408/425/429 transient, 401/403 after the
    # user signs in again): a stored one would be replayed for ever, the operation never run.
    def not_now(ctx: Any) -> Any:
        create_note(ctx)  # written, then refused: must not survive
        return status, {"detail": "not now"}, {"Retry-After": "1"}

    refused = _refused_then_retried(notes_db, server_clock, not_now)
    assert refused.status_code == status and refused.headers["retry-after"] == "1"


def test_a_4xx_rolls_back_the_handlers_writes_but_is_stored(
    notes_db: Database, server_clock: FakeClock
) -> None:
    intake = Intake(notes_db, now=server_clock)
    intake.add_operation("POST", "/notes", failing_handler("4xx"))
    with TestClient(create_app(intake, purge_interval=None)) as c:
        first = c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"})
        again = c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"})
    assert (first.status_code, again.status_code) == (409, 409)
    assert again.headers["idempotent-replayed"] == "true"
    assert read_ledger(notes_db) == []


def test_retention_replay_then_already_applied_then_free(
    client: TestClient, notes_db: Database, server_clock: FakeClock
) -> None:
    first = post(client, "old", {"id": "1", "op": "create"}, **{"X-Pigeon-Operation-Id": "op-7"})
    server_clock.advance(DAY - 1)
    assert post(client, "old", {"id": "1", "op": "create"}).content == first.content
    server_clock.advance(2)  # a week offline: the stored body is gone, the claim is not
    late = post(client, "old", {"id": "1", "op": "create"})
    assert late.status_code == 200 and late.headers["idempotent-replayed"] == "true"
    assert late.json()["status"] == "already_applied"
    assert late.json()["operation_id"] == "op-7"
    assert late.json()["original_status"] == 201
    assert len(read_ledger(notes_db)) == 1
    assert client.app.state.intake.purge() == (1, 0)  # type: ignore[attr-defined]
    assert post(client, "old", {"id": "1", "op": "create"}).json() == late.json()
    server_clock.advance(6 * DAY)  # past claim retention: the key is free (the note exists: 409)
    assert post(client, "old", {"id": "1", "op": "create"}).status_code == 409


def test_already_applied_keeps_a_refusal_a_refusal(
    client: TestClient, notes_db: Database, server_clock: FakeClock
) -> None:
    assert post(client, "mk", {"id": "1"}).status_code == 201
    refused = post(client, "dup", {"id": "1"})  # the note exists: a stored 409
    assert refused.status_code == 409
    server_clock.advance(DAY + 1)  # the stored body is gone, the claim is not
    late = post(client, "dup", {"id": "1"})
    assert late.status_code == 409, "a client must never read a refused write as delivered"
    assert late.json()["status"] == "already_applied"
    assert late.json()["original_status"] == 409
    assert late.headers["idempotent-replayed"] == "true"


def test_already_applied_conflict_carries_the_current_version(
    client: TestClient, notes_db: Database, server_clock: FakeClock
) -> None:
    """A 412 (or 409) answered "already applied" after its stored body is gone names the
    entity's current version and data, as the original did: without them the client's
    resolver has no remote side and can only hold the conflict for the user."""
    assert post(client, "mk", {"id": "1", "title": "a"}).status_code == 201
    moved = client.put("/notes/1", json={"title": "b"}, headers=ALICE | {"Idempotency-Key": "m"})
    assert moved.headers["etag"] == '"2"'
    stale = ALICE | {"Idempotency-Key": "stale", "If-Match": '"1"'}
    first = client.put("/notes/1", json={"title": "c"}, headers=stale)
    assert first.status_code == 412 and first.json()["version"] == 2
    client.patch("/notes/1", json={"tag": "x"}, headers=ALICE | {"Idempotency-Key": "p"})
    server_clock.advance(DAY + 1)  # the stored 412 is gone, the claim is not
    late = client.put("/notes/1", json={"title": "c"}, headers=stale)
    assert late.status_code == 412 and late.headers["idempotent-replayed"] == "true"
    body = late.json()
    assert (body["status"], body["original_status"]) == ("already_applied", 412)
    # The current state, not the one the original 412 saw: version 3 after the PATCH.
    assert body["current"]["version"] == 3
    assert body["current"]["data"] == {"title": "b", "tag": "x"}
    refused = post(client, "dup", {"id": "1"})  # a create of an existing note: 409
    server_clock.advance(DAY + 1)
    late_409 = post(client, "dup", {"id": "1"})
    assert late_409.status_code == 409 and late_409.json()["current"]["version"] == 3
    assert refused.json()["current"]["version"] == 3
    # A write that took effect says only "already applied": its current state is not what
    # this client wrote, and must not become the base of its next merge.
    done = client.put("/notes/1", json={"title": "b"}, headers=ALICE | {"Idempotency-Key": "m"})
    assert done.status_code == 200 and "current" not in done.json()
    assert len(read_ledger(notes_db)) == 3


def test_store_unavailable_fails_closed_with_503(tmp_path: Path, server_clock: FakeClock) -> None:
    path = tmp_path / "server.db"
    notes_db = open_server_db(path)
    app = create_notes_app(notes_db, now=server_clock, purge_interval=None)
    with TestClient(app) as c:
        assert post(c, "k1", {"id": "1"}).status_code == 201
        notes_db.close()
        os.rename(path, tmp_path / "moved.db")
        os.mkdir(path)  # the database path is now a directory: nothing can be opened
        down = post(c, "k2", {"id": "2"})
        batch = c.post("/pigeon/v1/batch", json={"operations": []})
    assert down.status_code == 503 and down.headers["retry-after"]
    assert down.headers["content-type"] == PROBLEM_JSON
    assert batch.status_code == 503


def test_separate_claim_mode_answers_409_while_in_progress_and_recovers_orphans(
    notes_db: Database, server_clock: FakeClock
) -> None:
    policy = IdempotencyPolicy(lock_timeout=30)
    # An orphan: a process claimed the key (committed) and died before its work committed.
    orphan_intake = Intake(notes_db, IntakeOptions(policy), now=server_clock)
    with notes_db.transaction() as tx:
        orphan = orphan_intake.store.claim(
            tx,
            principal="anonymous",
            key="k",
            fingerprint=_print({"id": "1"}),
            method="POST",
            path="/notes",
            operation_id="k",
        )
    assert orphan.claim is not None
    options = ServerOptions(intake=IntakeOptions(policy, claim_mode="separate"))
    app = create_notes_app(notes_db, options, now=server_clock, purge_interval=None)
    with TestClient(app) as c:
        busy = c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"})
        assert busy.status_code == 409 and busy.headers["retry-after"] == "30"
        assert busy.headers["content-type"] == PROBLEM_JSON
        server_clock.advance(31)
        done = c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"})
        assert done.status_code == 201
        assert (
            c.post("/notes", json={"id": "1"}, headers={"Idempotency-Key": "k"}).headers[
                "idempotent-replayed"
            ]
            == "true"
        )
    assert len(read_ledger(notes_db)) == 1


def _print(body: Any) -> str:
    from pigeon.server.fingerprint import fingerprint

    return fingerprint("POST", "/notes", body)


def test_authentication_can_be_required(notes_db: Database) -> None:
    from pigeon.server.auth import BearerAuth

    app = create_notes_app(notes_db, authenticate=BearerAuth(required=True), purge_interval=None)
    with TestClient(app) as c:
        anonymous = c.post("/notes", json={}, headers={"Idempotency-Key": "k"})
        malformed = c.post(
            "/notes", json={}, headers={"Idempotency-Key": "k", "Authorization": "Basic x"}
        )
        ok = c.post(
            "/notes", json={}, headers={"Idempotency-Key": "k", "Authorization": "Bearer a.b"}
        )
    assert (anonymous.status_code, malformed.status_code, ok.status_code) == (401, 401, 201)
    assert read_ledger(notes_db)[0]["principal"] == "a"


def test_the_purge_loop_survives_a_failed_round(notes_db: Database) -> None:
    """One failed purge round that is not a store outage (sqlite3.DatabaseError, a
    psycopg InternalError...) ended the background task for good: nothing was purged
    again until a restart, and the tables grew without bound. It is logged and the next
    round runs."""

    class FlakyPurge(Intake):
        rounds = 0

        def purge(self, batch: int = 5000) -> tuple[int, int]:
            FlakyPurge.rounds += 1
            if FlakyPurge.rounds == 1:
                raise sqlite3.DatabaseError("database disk image is malformed")
            return super().purge(batch)

    intake = FlakyPurge(notes_db)
    intake.add_operation("POST", "/notes", create_note)
    with TestClient(create_app(intake, purge_interval=0.05)):
        deadline = time.monotonic() + 5
        while FlakyPurge.rounds < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert FlakyPurge.rounds >= 3
