"""The example's own tests: an order is one row and the two jobs it owes, once per key."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from examples.fastapi_orders.app import create_app, migrate
from examples.fastapi_orders.models import Note, Order

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


def test_pigeons_migrations_leave_the_apps_notes_table_alone(client: TestClient) -> None:
    client.post("/notes", json={"id": "n1"}, headers={"Idempotency-Key": "k"})
    migrate(client.app.state.engine)  # type: ignore[attr-defined]  # again: changes nothing
    with Session(client.app.state.engine) as db:  # type: ignore[attr-defined]
        assert db.scalar(select(func.count()).select_from(Note)) == 1
