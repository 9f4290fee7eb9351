"""Encryption at rest on the server, on both backends: a canary secret written through the
intake (a note and its stored response), a record, a job's payload, a failing job's errors,
the outbox and an effect's result is absent from the database files' bytes (SQLite) and
from every stored value (PostgreSQL), and every one of them still reads back in clear
through pigeon's own APIs. Without a key nothing changes; a missing key is a typed error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pigeon.jobs import outbox, records
from pigeon.jobs.app import App
from pigeon.jobs.effects import effect_in
from pigeon.jobs.failed import FailedStore, list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.relay import CallablePublisher, Message, Relay
from pigeon.jobs.stats import failed_by_owner
from pigeon.reference.notes import create_note, create_notes_app, delete_note
from pigeon.reference.notes_many import create_notes, delete_notes
from pigeon.reference.schema import attach
from pigeon.server.intake import Intake, OperationRequest
from pigeon.storage.base import Database
from pigeon.storage.crypto import SEALED, Cipher, KeyMissing, Keyring, generate_key, kid_of
from pigeon.storage.sealed import NOTE_DATA
from pigeon.storage.server import open_server_db
from tests.server.conftest import TestClient, failing_handler

CANARY = "canary-7f3a9c-secret"
KEYS = Keyring((("k1", generate_key()),))

jobs_app = App(default_owner="ops")
jobs_app.queue("work", owner="ops")


@jobs_app.task(queue="work", max_attempts=2)
def leak(secret: str) -> None:  # never run here: the test finishes its attempts by hand
    raise RuntimeError(f"failed on {secret}")


@pytest.fixture
def sealed_db(server_db_url: str) -> Iterator[Database]:
    """The server database on each backend, sealing with the tests' keyring."""
    database = open_server_db(server_db_url, keyring=KEYS)
    yield database
    database.close()


def _write_everything(notes_db: Database) -> dict[str, Any]:
    """The canary through every sealed path; returns what to read back."""
    client = TestClient(create_notes_app(notes_db, purge_interval=None))
    key = str(uuid.uuid4())
    note = {"id": "n1", "title": "t", "body": CANARY}
    created = client.post("/notes", json=note, headers={"Idempotency-Key": key})
    assert created.status_code == 201, created.text
    replayed = client.post("/notes", json=note, headers={"Idempotency-Key": key})
    assert replayed.headers.get("idempotent-replayed") == "true"
    assert replayed.json() == created.json()
    assert client.get("/notes/n1").json()["data"]["body"] == CANARY
    patched = client.patch(
        "/notes/n1", json={"extra": CANARY * 2}, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert patched.status_code == 200, patched.text
    assert client.get("/notes").json()["notes"][0]["data"]["extra"] == CANARY * 2
    # A replace, its 412 (the current note opened) and a delete (the data kept sealed).
    put = {"title": "t", "body": CANARY, "extra": CANARY * 2}
    for if_match, status in (('"2"', 200), ('"2"', 412)):
        headers = {"Idempotency-Key": str(uuid.uuid4()), "If-Match": if_match}
        replaced = client.put("/notes/n1", json=put, headers=headers)
        assert replaced.status_code == status and replaced.json()["data"] == put, replaced.text
    assert client.post(
        "/notes", json={"id": "n2", "body": CANARY}, headers={"Idempotency-Key": key + "2"}
    )
    deleted = client.delete("/notes/n2", headers={"Idempotency-Key": str(uuid.uuid4())})
    assert deleted.json() == {"id": "n2", "deleted": True, "version": 2}

    with notes_db.transaction() as tx:
        rid = records.accept(
            tx,
            kind="answer",
            data={"answer": CANARY},
            obligations={"work": JobSpec("work", "leak", {"secret": CANARY})},
            app=jobs_app,
        )
        outbox.add(tx, "answers", {"answer": CANARY})
        effect_in(tx, "grade", rid, lambda _tx: {"echo": CANARY}, now=1.0)
    manager = JobManager(notes_db, jobs_app)
    for _ in range(2):  # one retry (requeued with its error), then the failed store
        (job,) = manager.lease_jobs("work", "w1", 1, 30.0)
        assert job.payload == {"secret": CANARY}
        manager.finish([AttemptOutcome(job, RuntimeError(f"failed on {CANARY}"))])
        with notes_db.transaction() as tx:  # due at once, not after the backoff
            tx.sql("UPDATE pigeon_jobs SET scheduled_at = 0")
    return {"record": rid, "job": job.id}


def _read_back(notes_db: Database, ids: dict[str, Any]) -> None:
    record = records.get(notes_db, ids["record"])
    assert record["data"] == {"answer": CANARY}
    assert any(CANARY in str(e["detail"]) for e in record["events"])
    (failed,) = list_jobs(notes_db, status="failed")
    assert failed["payload"] == {"secret": CANARY} and CANARY in failed["last_error"]
    shown = FailedStore(notes_db).show(ids["job"])
    assert all(CANARY in (a["error"] or "") for a in shown["history"])
    assert CANARY in failed_by_owner(notes_db)["ops"]["recent"][0]["error"]
    published: list[Message] = []
    Relay(notes_db, CallablePublisher(published.append)).run_once()
    assert [m.payload for m in published] == [{"answer": CANARY}]


def _raw_values(url: str) -> list[str]:
    """Every stored value of every table, as PostgreSQL prints the rows."""
    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        ]
        return [
            str(row[0])
            for table in tables
            for row in conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()
        ]


def _raw_bytes(url: str) -> bytes:
    return b"".join(
        Path(url + suffix).read_bytes()
        for suffix in ("", "-wal", "-shm")
        if Path(url + suffix).exists()
    )


def test_a_canary_never_reaches_the_database_in_clear(
    sealed_db: Database, server_db_url: str
) -> None:
    ids = _write_everything(sealed_db)
    _read_back(sealed_db, ids)
    if sealed_db.backend == "sqlite":
        raw = _raw_bytes(server_db_url)
        assert CANARY.encode() not in raw
        assert SEALED.encode() + b"k1:" in raw  # the values are there, sealed
    else:
        values = _raw_values(server_db_url)
        assert not [v for v in values if CANARY in v]
        assert any(f"{SEALED}k1:" in v for v in values)


def test_without_a_key_the_same_values_are_stored_in_clear(server_db_url: str) -> None:
    """The control: the check above would see the canary if sealing were off."""
    database = open_server_db(server_db_url)
    try:
        _read_back(database, _write_everything(database))
    finally:
        database.close()
    if server_db_url.startswith("postgresql://"):
        assert any(CANARY in v for v in _raw_values(server_db_url))
    else:
        assert CANARY.encode() in _raw_bytes(server_db_url)


def test_a_database_sealed_with_a_key_the_reader_lacks_is_a_typed_error(
    sealed_db: Database, server_db_url: str
) -> None:
    ids = _write_everything(sealed_db)
    for keyring in (None, Keyring((("other", generate_key()),))):
        stranger = open_server_db(server_db_url, keyring=keyring)
        try:
            with pytest.raises(KeyMissing, match="'k1'"):
                records.get(stranger, ids["record"])
            with pytest.raises(KeyMissing, match="'k1'"):
                list_jobs(stranger, status="failed")
        finally:
            stranger.close()


def test_a_row_written_in_clear_before_the_key_stays_readable_and_new_rows_are_sealed(
    server_db_url: str,
) -> None:
    before = open_server_db(server_db_url)
    with before.transaction() as tx:
        old = records.accept(tx, kind="k", data={"v": "old"})
    before.close()
    after = open_server_db(server_db_url, keyring=KEYS)
    try:
        with after.transaction() as tx:
            new = records.accept(tx, kind="k", data={"v": "new"})
        assert records.get(after, old)["data"] == {"v": "old"}
        assert records.get(after, new)["data"] == {"v": "new"}
        with after.transaction() as tx:
            stored = {
                r["id"]: r["data"] for r in tx.sql("SELECT id, data FROM pigeon_records").fetchall()
            }
        assert kid_of(stored[old]) is None and kid_of(stored[new]) == "k1"
    finally:
        after.close()


class CountingCipher(Cipher):
    """The real cipher, counting the notes' data it seals and opens."""

    def __init__(self, keyring: Keyring) -> None:
        super().__init__(keyring)
        self.calls: list[str] = []

    def seal(self, value: Any, *ad: str) -> Any:
        self._count("seal", value, ad)
        return super().seal(value, *ad)

    def open(self, value: Any, *ad: str) -> Any:
        self._count("open", value, ad)
        return super().open(value, *ad)

    def _count(self, what: str, value: str | None, ad: tuple[str, ...]) -> None:
        if value is not None and ad[:2] == NOTE_DATA.ad:
            self.calls.append(what)


def _stored_notes(notes_db: Database) -> dict[str, str]:
    with notes_db.transaction() as tx:
        rows = tx.sql("SELECT id, data FROM ref_notes ORDER BY id").fetchall()
    return {r["id"]: r["data"] for r in rows}


@pytest.mark.parametrize("set_wise", [False, True], ids=["one", "set"])
def test_a_delete_keeps_the_sealed_data_as_stored_without_opening_it(
    sealed_db: Database, set_wise: bool
) -> None:
    cipher = CountingCipher(KEYS)
    sealed_db.cipher = cipher
    attach(sealed_db)
    intake = Intake(sealed_db)
    intake.add_operation("POST", "/notes", create_note, many=create_notes)
    # Set-wise, a delete answered the one-by-one way would be a 500 here.
    one_by_one = failing_handler("raise") if set_wise else delete_note
    intake.add_operation("DELETE", "/notes/{id}", one_by_one, many=delete_notes)
    notes = [{"id": f"n{i}", "body": CANARY * i} for i in range(3)]
    made = intake.execute_batch(
        "p", [OperationRequest("POST", "/notes", n, n["id"], n["id"]) for n in notes]
    )
    assert [r.status for r in made] == [201] * 3
    before = _stored_notes(sealed_db)
    assert all(kid_of(v) == "k1" for v in before.values())
    cipher.calls.clear()
    deletes = [
        OperationRequest("DELETE", f"/notes/{n['id']}", None, f"d{n['id']}", f"d{n['id']}")
        for n in notes
    ]
    if set_wise:
        results = intake.execute_batch("p", deletes)
    else:
        results = [intake.execute("p", op) for op in deletes]
    assert [r.body for r in results] == [
        {"id": n["id"], "deleted": True, "version": 2} for n in notes
    ]
    assert cipher.calls == []  # neither opened nor sealed again
    assert _stored_notes(sealed_db) == before  # the very bytes
