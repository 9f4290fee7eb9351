"""The drivers' errors, said in pigeon's words: the one place that reads SQLite result codes
and PostgreSQL SQLSTATEs.

A backend raises pigeon's errors out of a transaction (``Database.transaction`` and the
connections it hands out): ``StoreUnavailable`` (the store cannot serve now), its kind
``Contention`` (a deadlock or serialization victim: nothing of it committed, run it again,
see ``retried``), ``LockTimeout`` (a bounded lock wait ran out) and ``StorageFull``. Domain
code (the intake, the middleware, jobs) asks the questions below instead of importing
``sqlite3`` or ``psycopg``: they answer for a driver's error caught inside a transaction
(a handler's own statement) as well as for pigeon's error raised out of one.

A statement's own fault (a syntax error, a missing column, a constraint of the
application's own tables) stays the driver's error: it is the application's SQL, written
for its driver, and it fails the same way on every run, whatever the store's health.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pigeon.exceptions import Contention, LockTimeout, StorageFull, StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


def _loaded_psycopg() -> Any:
    """psycopg, if this process has loaded it, else None. A psycopg error can exist only
    once psycopg is loaded, so asking "is this a psycopg error?" never needs the import:
    a process that only ever opens SQLite (an edge app, a SQLite server or worker) never
    loads the driver, however often the question is asked."""
    return sys.modules.get("psycopg")


def _psycopg_down() -> tuple[type[BaseException], ...]:
    """psycopg's OperationalError, if psycopg is loaded (see `_loaded_psycopg`)."""
    found = getattr(_loaded_psycopg(), "OperationalError", None)
    return (found,) if found is not None else ()


def store_down_errors() -> tuple[type[BaseException], ...]:
    """The errors that may mean "the store cannot be used right now": the intake fails
    closed (503). ``store_down`` tells a statement's own fault among the drivers' ones.
    Ask for it where the error is caught (``except store_down_errors() as exc``): the
    answer grows when a PostgreSQL database is first opened."""
    return (StoreUnavailable, sqlite3.OperationalError, *_psycopg_down())


def driver_errors() -> tuple[type[BaseException], ...]:
    """Every error a database driver raises (``sqlite3.Error``, and ``psycopg.Error`` once
    psycopg is loaded), for the layers that report them without naming a driver: the CLI
    turns them into a one-line message."""
    found = getattr(_loaded_psycopg(), "Error", None)
    return (sqlite3.Error, found) if found is not None else (sqlite3.Error,)


def is_driver_error(exc: BaseException) -> bool:
    """Was ``exc`` raised by a database driver (see `driver_errors`)?"""
    return isinstance(exc, driver_errors())


# The drivers' errors whose messages speak of the store (locked, disk I/O error, no such
# table) and so may be logged as they are (`pigeon.logs.SAFE_MESSAGES`): SQLite's
# OperationalError, the one the logs have always kept.
SAFE_DRIVER_MESSAGES: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)


# SQLite's primary result codes that mean the file cannot be used now, as opposed to
# SQLITE_ERROR (1), which is a statement's own fault (a handler's bad SQL, a missing
# column): BUSY, LOCKED, NOMEM, READONLY, INTERRUPT, IOERR, CORRUPT, FULL, CANTOPEN,
# PROTOCOL, NOTADB.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 26})

# psycopg raises OperationalError for these SQLSTATE classes and codes, which mean the
# server or the connection cannot serve now: connection exception (08), a transaction
# aborted by contention (40: run again, see ``retried``), insufficient resources (53),
# operator intervention (57: shutdown, statement timeout), system error (58) and
# lock_not_available (55P03). The rest of what it raises as OperationalError, above all
# 54 "program limit exceeded" (a value too large for an index, too many columns), is the
# statement's own fault: it fails the same way on every run.
_PG_UNAVAILABLE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
LOCK_NOT_AVAILABLE = "55P03"
_PG_UNAVAILABLE_STATES = frozenset({LOCK_NOT_AVAILABLE})
# SQLSTATEs with which PostgreSQL aborts a transaction to settle contention, expecting it
# to be run again: serialization_failure and deadlock_detected. Not the rest of class 40
# (a deferred constraint violated at commit fails again however often it is run).
_CONTENTION_STATES = frozenset({"40001", "40P01"})
_DISK_FULL = "53100"
_UNIQUE_VIOLATION = "23505"
# SQLite's extended codes for a row whose key another row has.
_SQLITE_DUPLICATE = frozenset({1555, 2067})  # SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE

CONTENTION_RETRIES = 3  # runs after the first, each after a short random pause


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def is_full(exc: BaseException) -> bool:
    """Is ``exc`` the store saying it cannot grow: SQLite's SQLITE_FULL (a full disk, or
    the connection's ``max_page_count`` reached), PostgreSQL's disk_full, or pigeon's
    ``StorageFull``? An error made by hand has no code."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF == sqlite3.SQLITE_FULL
    return _sqlstate(exc) == _DISK_FULL


def duplicate_row(exc: BaseException) -> bool:
    """Did an INSERT meet a row with its key: PostgreSQL's unique_violation, SQLite's
    UNIQUE or PRIMARY KEY constraint? A driver's error wrapped in an application's (a
    framework's IntegrityError) is found through the cause chain, as in ``contended``."""
    return any(
        getattr(current, "sqlite_errorcode", None) in _SQLITE_DUPLICATE
        if isinstance(current, sqlite3.IntegrityError)
        else _sqlstate(current) == _UNIQUE_VIOLATION
        for current in _causes(exc)
    )


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def store_down(exc: BaseException) -> bool:
    """Is this one of `store_down_errors` because the store is unavailable, rather than a SQL
    error of the statement that raised it? Only the former fails a whole group or batch
    with 503; the latter is the failure of the one operation whose handler ran it (a
    503 for it would be sent again, and fail again, for ever, with its batch)."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is None or code & 0xFF in _SQLITE_UNAVAILABLE
    state = _sqlstate(exc)
    if state is not None:
        # No SQLSTATE at all (the server never answered) stays "down".
        return state[:2] in _PG_UNAVAILABLE_CLASSES or state in _PG_UNAVAILABLE_STATES
    return isinstance(exc, store_down_errors())


def contended(exc: BaseException) -> bool:
    """Was the transaction aborted to break a deadlock or a serialization conflict? Then
    nothing of it committed and running it again is the cure, not a 503: the store is up,
    and the other transaction has already gone on. (A driver's error wrapped in pigeon's
    is found through the cause chain.)"""
    return any(
        isinstance(current, Contention) or _sqlstate(current) in _CONTENTION_STATES
        for current in _causes(exc)
    )


def lock_timed_out(exc: BaseException) -> bool:
    """Did a bounded lock wait run out (``LockTimeout``, or the driver's 55P03)?"""
    return isinstance(exc, LockTimeout) or _sqlstate(exc) == LOCK_NOT_AVAILABLE


def from_postgres(exc: BaseException, what: str = "PostgreSQL unavailable") -> BaseException:
    """pigeon's error for a psycopg error that left a transaction or a connection, or
    ``exc`` itself when it is the statement's own fault."""
    state = _sqlstate(exc)
    if state == _DISK_FULL:  # an OperationalError (class 53), but not "unavailable"
        return StorageFull(f"PostgreSQL: disk full; nothing of the transaction was written ({exc})")
    if state in _CONTENTION_STATES:
        return Contention(f"{what}: {exc}")
    if state == LOCK_NOT_AVAILABLE:
        return LockTimeout(f"{what}: {exc}")
    if isinstance(exc, _psycopg_down()):
        return StoreUnavailable(f"{what}: {exc}")
    return exc


def retried(run: Callable[[], T], *, retries: int = CONTENTION_RETRIES) -> T:
    """``run()``, which opens and commits a transaction of its own, run again from the
    start while the database aborts it as a deadlock victim (at most ``retries`` more
    times). Only a whole transaction is run again: a part of one cannot be, its snapshot
    and the locks it took before the abort are gone with it."""
    attempt = 0
    while True:
        try:
            return run()
        except store_down_errors() as exc:
            if attempt >= retries or not contended(exc):
                raise
            attempt += 1
            log.info("transaction aborted by contention, running it again (%d): %s", attempt, exc)
            # A random pause, growing: two victims of one another do not meet in step again.
            time.sleep(random.uniform(0, 0.01 * 2**attempt))


__all__ = [
    "CONTENTION_RETRIES",
    "SAFE_DRIVER_MESSAGES",
    "Contention",
    "LockTimeout",
    "contended",
    "driver_errors",
    "from_postgres",
    "is_driver_error",
    "is_full",
    "lock_timed_out",
    "retried",
    "store_down",
    "store_down_errors",
]
