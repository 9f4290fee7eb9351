"""``pigeon serve --app examples.fastapi_orders.app:serve``: the FastAPI example served by a
real ``pigeon serve`` process with the command's options, its authentication, body limit
and test hooks (delay, fail, Set-Cookie, a crash after the commit) honoured by
``@pigeon.idempotent``, over real HTTP."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy
from fastapi import FastAPI

from pigeon.exceptions import ConfigurationError
from pigeon.integrations.fastapi import Pigeon
from pigeon.server import IntakeOptions, ServerOptions
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.options import BodyLimits, DatabaseOptions, over_own
from pigeon.storage.crypto import Keyring, generate_key
from tests import processes
from tests.integrations.orders_app import create_app, sqlalchemy_url
from tests.integrations.served_apps import batch_of

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

APP = "examples.fastapi_orders.app:serve"
ROOT = Path(__file__).resolve().parents[2]
PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]
ADA = {"Authorization": "Bearer ada.1"}  # the demo stand-in's: principal "ada"


@contextmanager
def served(db: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``pigeon serve --app`` with the test hooks, once its app answers."""
    env = os.environ | {"PIGEON_TEST_HOOKS": "1"}
    with processes.served_app(
        APP, str(db), *extra, probe="/openapi.json", env=env, cwd=ROOT
    ) as served:
        yield served


def note(url: str, key: str, **headers: str) -> httpx.Response:
    body = {"id": "n1", "title": "tea"}
    hooks = {"Idempotency-Key": key, **ADA, **headers}
    return httpx.post(url + "/notes", json=body, headers=hooks, timeout=30)


def effects(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [key for (key,) in conn.execute("SELECT idempotency_key FROM note_effects")]


def test_the_commands_options_reach_the_apps_idempotent_routes(tmp_path: Path) -> None:
    db = tmp_path / "orders.db"
    with served(db, "--max-body", "200", "--max-batch-body", "2000") as (_, url):
        assert note(url, "k1", Authorization="").status_code == 401  # --auth demo, no token
        failed = note(url, "k1", **{"X-Pigeon-Test-Fail": "1"})
        assert failed.status_code == 500 and effects(db) == []  # rolled back, key free
        first = note(url, "k1", **{"X-Pigeon-Test-Set-Cookie": "s=1"})
        assert first.status_code == 201 and first.headers["set-cookie"] == "s=1"
        again = note(url, "k1")
        assert again.headers["idempotent-replayed"] == "true" and again.content == first.content
        assert "set-cookie" not in again.headers  # a cookie is the connection's, not the key's
        big = httpx.post(
            url + "/notes", json={"title": "x" * 300}, headers=ADA | {"Idempotency-Key": "k2"}
        )
        assert big.status_code == 413
        listed = httpx.get(url + "/notes", headers={"Authorization": "Bearer ada.2"}).json()
        assert [n["id"] for n in listed["notes"]] == ["n1"]  # the same principal, ada
        assert batch_of(url, 2500, "b1") == 413  # --max-batch-body, whole
        assert batch_of(url, 1500, "b2") == 200  # its one note is under --max-body
    assert effects(db) == ["k1", "b2"]


def test_two_serving_processes_on_a_fresh_database_make_each_table_once(tmp_path: Path) -> None:
    # Each process migrates as it starts; before the migration took pigeon's lock first,
    # two could both find a table missing and one failed making it.
    db = tmp_path / "orders.db"
    with served(db, "--workers", "2") as (_, url):
        made = [
            httpx.post(
                url + "/notes", json={"id": f"n{i}"}, headers=ADA | {"Idempotency-Key": f"k{i}"}
            ).status_code
            for i in range(8)
        ]
    assert made == [201] * 8 and sorted(effects(db)) == [f"k{i}" for i in range(8)]


def test_a_duplicate_of_a_request_held_by_the_delay_hook_is_409(tmp_path: Path) -> None:
    with served(tmp_path / "orders.db") as (_, url):
        held: list[httpx.Response] = []
        original = threading.Thread(
            target=lambda: held.append(note(url, "k1", **{"X-Pigeon-Test-Delay-Ms": "2000"}))
        )
        original.start()
        time.sleep(0.8)
        duplicate = note(url, "k1")
        original.join(30)
    assert duplicate.status_code == 409 and int(duplicate.headers["retry-after"]) >= 1
    assert held[0].status_code == 201


@pytest.mark.chaos
def test_killed_after_the_commit_by_the_crash_hook_the_resend_replays(tmp_path: Path) -> None:
    db = tmp_path / "orders.db"
    with served(db) as (proc, url):
        with pytest.raises(httpx.TransportError):
            note(url, "k1", **{"X-Pigeon-Test-Crash": "after-commit"})
        assert proc.wait(30) == -9  # SIGKILLed by itself, before answering
    assert effects(db) == ["k1"]  # committed, never answered
    with served(db) as (_, url):
        again = note(url, "k1")
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert effects(db) == ["k1"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (ServerOptions(intake=IntakeOptions(claim_mode="separate")), "claim_mode"),
        (ServerOptions(intake=IntakeOptions(in_progress_wait=2)), "in_progress_wait"),
        (ServerOptions(database=DatabaseOptions("o.db", durability="normal")), "durability"),
    ],
)
def test_options_with_no_meaning_where_the_app_writes_are_refused(
    options: ServerOptions, field: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Pigeon().install(FastAPI(), options=options)
    assert refused.value.field == field
    # On PostgreSQL --durability means nothing to pigeon either: taken without a word.
    on_postgres = ServerOptions(database=DatabaseOptions("postgresql://h/d", durability="normal"))
    Pigeon().install(FastAPI(), options=on_postgres)


def test_what_the_command_was_not_given_leaves_the_apps_own_settings(app_db: str) -> None:
    # Before, the command's every default replaced the app's Pigeon(...) settings: its
    # body limit, its policy, its keyring (and stored answers went unsealed).
    body = {"item": "tea", "pad": "x" * 1000}
    own = create_app(app_db, max_body=300, options=ServerOptions())
    given = ServerOptions(limits=BodyLimits(max_body=5000))
    for app, status in [(own, 413), (create_app(app_db, max_body=300, options=given), 201)]:
        with TestClient(app) as client:
            sent = client.post("/orders", json=body, headers={"Idempotency-Key": f"k{status}"})
        assert sent.status_code == status, sent.text
    sealing = create_app(app_db, keyring=Keyring((("k1", generate_key()),)), options=given)
    with TestClient(sealing) as client:
        sealed = client.post("/orders", json={"item": "tea"}, headers={"Idempotency-Key": "k3"})
    assert sealed.status_code == 201 and "tea" not in _stored(app_db, "k3")  # the app's key


def _stored(url: str, key: str) -> str:
    engine = sqlalchemy.create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sqlalchemy.text(
                    "SELECT response_body FROM pigeon_idempotency_claims WHERE idem_key = :k"
                ),
                {"k": key},
            ).scalar_one()
    finally:
        engine.dispose()
    return str(found)


def test_a_policy_is_taken_field_by_field_and_checked_whole() -> None:
    own = IdempotencyPolicy(lock_timeout=3.0, response_retention=60.0, claim_retention=120.0)
    usual = IdempotencyPolicy()
    assert over_own(usual, usual, own) == own
    merged = over_own(IdempotencyPolicy(lock_timeout=7.0), usual, own)
    assert merged == IdempotencyPolicy(7.0, 60.0, 120.0)
    assert over_own(5, 10, 3) == 5 and over_own(10, 10, 3) == 3
    with pytest.raises(ConfigurationError):  # a lock held longer than the answer is kept
        over_own(IdempotencyPolicy(lock_timeout=90.0), usual, own)
