"""The example's own tests: an order is one row and the two jobs it owes, once per key."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from examples.fastapi_orders import jobs
from examples.fastapi_orders.app import create_app, migrate
from examples.fastapi_orders.models import Note, Order
from pigeon.core.wire import MAX_JSON_DEPTH
from pigeon.jobs import JobContext, JobManager, Timeouts
from pigeon.storage.server import open_server_db

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(f"sqlite:///{tmp_path / 'orders.db'}")
    migrate(app.state.engine)
    with TestClient(app) as test_client:
        yield test_client
    app.state.engine.dispose()


def test_an_order_is_one_row_and_its_two_jobs_once_per_key(client: TestClient) -> None:
    headers = {"Idempotency-Key": "o1", "Authorization": "Bearer ada"}
    body = {"item": "tea", "amount_cents": 350}
    placed = client.post("/orders", json=body, headers=headers)
    again = client.post("/orders", json=body, headers=headers)
    assert placed.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true" and again.json() == placed.json()
    assert placed.json() | {"id": 0} == {
        "id": 0, "owner": "ada", "item": "tea", "amount_cents": 350, "status": "placed"
    }  # fmt: skip
    with Session(client.app.state.engine) as db:  # type: ignore[attr-defined]
        assert db.scalar(select(func.count()).select_from(Order)) == 1
        jobs = db.execute(text("SELECT queue, task FROM pigeon_jobs ORDER BY queue")).all()
    assert [tuple(j) for j in jobs] == [("notifications", "notify"), ("payments", "charge")]
    mine = client.get(f"/orders/{placed.json()['id']}", headers={"Authorization": "Bearer ada"})
    assert mine.status_code == 200
    theirs = client.get(f"/orders/{placed.json()['id']}", headers={"Authorization": "Bearer bob"})
    assert theirs.status_code == 404


def test_a_refused_order_claims_nothing(client: TestClient) -> None:
    refused = client.post(
        "/orders", json={"item": "", "amount_cents": 0}, headers={"Idempotency-Key": "o1"}
    )
    assert refused.status_code == 422
    placed = client.post(
        "/orders", json={"item": "tea", "amount_cents": 1}, headers={"Idempotency-Key": "o1"}
    )
    assert placed.status_code == 201


DEEP = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)


def _rows(client: TestClient) -> tuple[int, int, int]:
    """Orders, jobs and claims: what a refused request must not leave."""
    with Session(client.app.state.engine) as db:  # type: ignore[attr-defined]
        orders = db.scalar(select(func.count()).select_from(Order))
        jobs = db.scalar(text("SELECT count(*) FROM pigeon_jobs"))
        claims = db.scalar(text("SELECT count(*) FROM pigeon_idempotency_claims"))
    return orders or 0, jobs or 0, claims or 0


@pytest.mark.parametrize(
    "amount",
    [
        pytest.param("NaN", id="NaN"),
        pytest.param("Infinity", id="Infinity"),
        pytest.param("-Infinity", id="-Infinity"),
        pytest.param("1e400", id="beyond-a-double"),
        pytest.param('350, "amount_cents": 350', id="a-key-twice"),
        pytest.param("true", id="a-bool-for-an-integer"),
        pytest.param('"350"', id="a-string-for-an-integer"),
        pytest.param(f'350, "extra": {DEEP}', id="too-deep"),
    ],
)
def test_a_body_that_is_no_order_is_a_4xx_and_leaves_the_key_free(
    client: TestClient, amount: str
) -> None:
    body = f'{{"item": "tea", "amount_cents": {amount}}}'
    headers = {"Idempotency-Key": "o1", "Content-Type": "application/json"}
    refused = client.post("/orders", content=body, headers=headers)
    assert 400 <= refused.status_code < 500, refused.text
    assert _rows(client) == (0, 0, 0)
    placed = client.post("/orders", json={"item": "tea", "amount_cents": 350}, headers=headers)
    assert placed.status_code == 201 and _rows(client) == (1, 2, 1)


@pytest.mark.parametrize("note_id", ["true", "1.5", "NaN", "[1]"])
def test_a_note_id_is_a_string_or_an_integer_never_a_bool(client: TestClient, note_id: str) -> None:
    headers = {"Idempotency-Key": "n1", "Content-Type": "application/json"}
    refused = client.post("/notes", content=f'{{"id": {note_id}}}', headers=headers)
    assert refused.status_code == 400, refused.text
    made = client.post("/notes", content='{"id": 42.0}', headers=headers)
    assert made.status_code == 201 and made.json()["id"] == "42"


def test_pigeons_migrations_leave_the_apps_notes_table_alone(client: TestClient) -> None:
    client.post("/notes", json={"id": "n1"}, headers={"Idempotency-Key": "k"})
    migrate(client.app.state.engine)  # type: ignore[attr-defined]  # again: changes nothing
    with Session(client.app.state.engine) as db:  # type: ignore[attr-defined]
        assert db.scalar(select(func.count()).select_from(Note)) == 1


def test_a_charge_run_twice_pays_its_order_once(client: TestClient, tmp_path: Path) -> None:
    headers = {"Idempotency-Key": "o1", "Authorization": "Bearer ada"}
    placed = client.post("/orders", json={"item": "tea", "amount_cents": 350}, headers=headers)
    db = open_server_db(tmp_path / "orders.db")  # the worker's: the app's own database
    try:
        (job,) = JobManager(db, jobs.app).lease_jobs("payments", "w", 1, lease=60.0)
        context = JobContext(job, db, Timeouts())
        for _ in range(2):  # run again, as after a crash before its job was marked done
            jobs.charge(context, **job.payload)
        with db.reading() as tx:
            claims = tx.sql("SELECT count(*) AS n FROM pigeon_effects").fetchone()
    finally:
        db.close()
    order = client.get(f"/orders/{placed.json()['id']}", headers=headers).json()
    assert order["status"] == "paid" and claims == {"n": 1}
