"""The drivers' errors in pigeon's words (``pigeon.storage.errors``). That nothing outside
storage and the stores imports a driver is checked package-wide by tests/test_seams.py."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
import threading
from pathlib import Path

import psycopg
import pytest

from pigeon.exceptions import Contention, LockTimeout, StorageFull, StoreUnavailable
from pigeon.storage.errors import (
    SAFE_DRIVER_MESSAGES,
    driver_errors,
    duplicate_row,
    from_postgres,
    is_driver_error,
    is_full,
    lock_timed_out,
    store_down,
    store_down_errors,
)
from pigeon.storage.postgres import probe
from pigeon.storage.server import open_server_db
from tests import processes


def test_postgres_errors_map_to_pigeons() -> None:
    errors = psycopg.errors
    assert isinstance(from_postgres(errors.DeadlockDetected("deadlock")), Contention)
    assert isinstance(from_postgres(errors.SerializationFailure("serialize")), Contention)
    assert isinstance(from_postgres(errors.LockNotAvailable("lock timeout")), LockTimeout)
    assert isinstance(from_postgres(errors.DiskFull("full")), StorageFull)
    assert type(from_postgres(errors.AdminShutdown("bye"))) is StoreUnavailable
    assert type(from_postgres(psycopg.OperationalError("refused"))) is StoreUnavailable
    own = errors.UndefinedColumn("no such column")
    assert from_postgres(own) is own  # the statement's own fault stays the driver's
    # Contention and LockTimeout are the store being unavailable (503 once retries ran out).
    assert store_down(Contention("x")) and store_down(LockTimeout("x"))
    assert lock_timed_out(LockTimeout("x")) and lock_timed_out(errors.LockNotAvailable("x"))
    assert is_full(StorageFull("x")) and is_full(errors.DiskFull("x"))


@pytest.mark.parametrize("url", ["sqlite", "postgres"])
def test_a_row_whose_key_another_has_is_told_from_other_constraints(
    url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # As each driver raises them (a code made by hand could differ from the real one).
    db = open_server_db(tmp_path / "x.db" if url == "sqlite" else request.getfixturevalue("pg_url"))
    errors: list[Exception] = []
    for statement in (
        "INSERT INTO pigeon_schema (component, version) VALUES ('c', 1)",  # a key twice
        "INSERT INTO pigeon_schema (component, version) VALUES ('d', NULL)",  # NOT NULL
    ):
        for _ in range(2):
            try:
                with db.transaction() as tx:
                    tx.sql(statement)
            except Exception as exc:
                errors.append(exc)
    db.close()
    assert [duplicate_row(exc) for exc in errors] == [True, False, False]
    assert not duplicate_row(ValueError("UNIQUE constraint failed"))
    try:  # as a framework wraps it
        raise ValueError("IntegrityError") from errors[0]
    except ValueError as wrapped:
        assert duplicate_row(wrapped)


def test_a_lock_wait_run_out_leaves_the_transaction_as_lock_timeout(pg_url: str) -> None:
    db = open_server_db(pg_url)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.transaction() as tx:
            tx.sql("LOCK TABLE pigeon_schema IN ACCESS EXCLUSIVE MODE")
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LockTimeout) as caught, db.transaction() as tx:
            tx.sql("SET LOCAL lock_timeout = '50ms'")
            tx.sql("SELECT * FROM pigeon_schema")
        assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
    finally:
        release.set()
        holder.join()
        db.close()


def test_the_drivers_errors_are_named_without_naming_a_driver() -> None:
    """What the CLI and the logs ask instead of importing a driver."""
    assert is_driver_error(sqlite3.OperationalError("database is locked"))
    assert is_driver_error(psycopg.errors.UndefinedTable("no such table"))  # loaded here
    assert not is_driver_error(StoreUnavailable("down")) and not is_driver_error(OSError())
    assert set(driver_errors()) == {sqlite3.Error, psycopg.Error}
    assert set(store_down_errors()) == {
        StoreUnavailable,
        sqlite3.OperationalError,
        psycopg.OperationalError,
    }
    assert sqlite3.OperationalError in SAFE_DRIVER_MESSAGES


def test_asking_about_driver_errors_does_not_load_psycopg() -> None:
    """A psycopg error can exist only once psycopg is loaded, so the questions answer
    without it."""
    code = textwrap.dedent(
        """
        import json, sqlite3, sys
        from pigeon.storage import errors
        asked = [errors.is_driver_error(sqlite3.Error()), len(errors.store_down_errors()),
                 len(errors.driver_errors()), errors.store_down(sqlite3.OperationalError())]
        print(json.dumps([asked, "psycopg" in sys.modules]))
        """
    )
    run = processes.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(run.stdout) == [[True, 2, 1, True], False]


def test_probe_names_why_postgres_cannot_be_reached(pg_url: str) -> None:
    probe(pg_url, 5)  # reachable: nothing raised, nothing left open
    with pytest.raises(StoreUnavailable, match=r"^cannot connect to PostgreSQL: .*does_not_exist"):
        probe(pg_url.rsplit("/", 1)[0] + "/does_not_exist", 5)
    with pytest.raises(StoreUnavailable, match=r"cannot connect to PostgreSQL: .*refused"):
        probe("postgresql://postgres@127.0.0.1:1/x", 5)  # nothing listens on port 1
