"""Retention purges run in bounded batches, one short transaction each, on every backend."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.server.idempotency import IdempotencyPolicy, StoredResponse
from pigeon.server.intake import Intake
from pigeon.server.options import IntakeOptions
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests.clocks import FakeClock
from tests.server.conftest import SERVER_START, CountingDatabase

POLICY = IdempotencyPolicy(lock_timeout=10, response_retention=100, claim_retention=1000)


def _complete_keys(intake: Intake, db: Database, keys: list[str]) -> None:
    with db.transaction() as tx:
        for key in keys:
            decision = intake.store.claim(
                tx,
                principal="p",
                key=key,
                fingerprint="f",
                method="POST",
                path="/x",
                operation_id=key,
            )
            assert decision.claim is not None
            intake.store.complete(tx, decision.claim, StoredResponse(201, '{"ok": true}'))


def test_purge_goes_in_bounded_batches_until_nothing_is_due(server_db_url: str) -> None:
    clock = FakeClock(SERVER_START)
    db = CountingDatabase(open_server_db(server_db_url))
    try:
        intake = Intake(db, IntakeOptions(POLICY), now=clock)
        _complete_keys(intake, db, [f"k{i}" for i in range(23)])
        clock.advance(50)
        _complete_keys(intake, db, ["young"])
        clock.advance(60)  # the 23 responses are due, "young" is not
        db.commits = 0
        assert intake.purge(batch=5) == (23, 0)
        if db.backend == "postgres":  # 5+5+5+5+3: five short transactions, never one long
            assert db.commits == 5
        with db.transaction() as tx:
            assert intake.store.stats(tx) == {"claims": 24, "in_progress": 0, "responses": 1}
        clock.advance(1000)
        assert intake.purge(batch=5) == (1, 24)
        with db.transaction() as tx:
            assert intake.store.stats(tx)["claims"] == 0
    finally:
        db.close()


def test_a_purge_skips_a_key_held_by_a_running_request_instead_of_waiting(pg_url: str) -> None:
    clock = FakeClock(SERVER_START)
    db = open_server_db(pg_url)
    try:
        intake = Intake(db, IntakeOptions(POLICY), now=clock)
        _complete_keys(intake, db, ["held", "free"])
        clock.advance(2000)
        locked, release = threading.Event(), threading.Event()

        def hold() -> None:  # another request sits on the "held" row, uncommitted
            with psycopg.connect(pg_url) as conn:
                conn.execute(
                    "SELECT 1 FROM pigeon_idempotency_claims WHERE idem_key = 'held' FOR UPDATE"
                )
                locked.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert locked.wait(10)
            assert intake.purge(batch=5) == (1, 1)  # returns at once, "held" untouched
        finally:
            release.set()
            holder.join()
        with db.transaction() as tx:
            assert intake.store.get(tx, "p", "held") is not None
            assert intake.store.get(tx, "p", "free") is None
        assert intake.purge(batch=5) == (1, 1)
    finally:
        db.close()


@pytest.mark.parametrize("batch", [0, -1])
def test_a_batch_must_be_positive(tmp_path: Path, batch: int) -> None:
    db = open_server_db(tmp_path / "s.db")
    try:
        with pytest.raises(ConfigurationError, match="batch"):
            Intake(db).purge(batch=batch)
    finally:
        db.close()
