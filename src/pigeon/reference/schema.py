"""The reference application's own tables: a schema component of its own (``reference``,
migrations in ``pigeon/reference/sql/<backend>/migrations``), its own ``ref_`` prefix and
its own named queries (``sql/<backend>/reference.sql``).

The library's server never makes these tables: `attach` does, when the reference app is
created (``create_notes_app``, ``pigeon serve``). The queries run through the
transaction's own SQL (``Tx.sql``), so the server's query set knows nothing of them and any
``Tx`` of either backend can run them (the intake's, a borrowed one, a wrapper's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pigeon.storage.base import Database, Row, Tx
from pigeon.storage.queries import QuerySet
from pigeon.storage.schema import Component, migrate_component

REFERENCE = Component("reference", package="pigeon.reference")
QUERIES = QuerySet(REFERENCE.name, REFERENCE.package)  # for the transaction's backend


def attach(db: Database) -> int:
    """Create or upgrade the reference app's tables in ``db``; returns their version.
    Idempotent and safe from several processes at once (`pigeon.storage.schema`)."""
    return migrate_component(db, REFERENCE)


def execute(tx: Tx, name: str, params: Mapping[str, Any] | None = None) -> Any:
    """The reference app's named statement ``name`` in ``tx``."""
    return QUERIES.run(tx, name, params)


def execute_rows(tx: Tx, name: str, rows: Sequence[Sequence[Any]], **shared: Any) -> int:
    """The reference app's statement ``name`` for each of ``rows`` (`QuerySet.run_rows`)."""
    return QUERIES.run_rows(tx, name, rows, shared)


def execute_rows_later(tx: Tx, name: str, rows: Sequence[Sequence[Any]], **shared: Any) -> None:
    """``execute_rows``, sent with the next round trip where it can (`QuerySet.run_rows_later`)."""
    QUERIES.run_rows_later(tx, name, rows, shared)


def execute_later(tx: Tx, name: str, params: Mapping[str, Any]) -> None:
    """``name`` in ``tx``, sent with its next round trip where it can (`QuerySet.run_later`)."""
    QUERIES.run_later(tx, name, params)


def has(tx: Tx, name: str) -> bool:
    """Has ``tx``'s backend the reference app's statement ``name``?"""
    return QUERIES.has(tx, name)


def fetchone(tx: Tx, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
    row: Row | None = execute(tx, name, params).fetchone()
    return row


def fetchall(tx: Tx, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
    rows: list[Row] = execute(tx, name, params).fetchall()
    return rows
