"""The storage seam: what server code may ask of any backend.

Managers (idempotency, records, jobs, outbox, ...) are written against these protocols
and ask for SQL by name; each backend supplies the same names in its own ``.sql`` files
(SQLite uses ``:name`` parameters, PostgreSQL ``%(name)s``; a hot path's statement run by
``executemany`` may take its parameters by position, and says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from pigeon.storage.crypto import Cipher

Row = dict[str, Any]
# One run's parameters: by name, or by position where a statement's placeholders are
# positional (a hot path's executemany, which then makes no dict per row).
Params = Mapping[str, Any] | Sequence[Any]


class Tx(Protocol):
    """An open transaction. Leaving the context commits; an exception rolls back."""

    backend: str
    # Seals and opens the columns that hold what users wrote (`pigeon.storage.crypto`):
    # the database's keyring, or PLAIN (pass-through) when none is configured.
    cipher: Cipher

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> Any: ...

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    def executemany(self, name: str, params: Sequence[Params]) -> int:
        """``name`` run once for each of ``params`` (by name, or by position for a
        statement written with positional placeholders), in one call; the rows it changed
        in all, as the driver counts them (-1 where it cannot tell)."""
        ...

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> Any:
        """The application's own SQL in this transaction (its tables, beside pigeon's), in
        the backend's parameter style: ``:name`` on SQLite, ``%(name)s`` on PostgreSQL.
        Returns the driver's cursor (``fetchone``/``fetchall``: rows as dicts)."""
        ...

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        """The application's own ``statement`` run once for each of ``params``, in one
        call, as ``executemany`` runs a named one; the rows it changed in all."""
        ...

    def savepoint(self) -> AbstractContextManager[None]: ...


class RowCursor(Protocol):
    """What a Tx's `sql` returns: a cursor whose rows are dicts."""

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...


C = TypeVar("C", bound=RowCursor)


class NamedStatements(Generic[C]):
    """A ``Tx``'s named statements (``queries``) run through its own ``sql`` (and
    ``sql_many``), whose cursor ``C`` gives rows as dicts."""

    queries: Mapping[str, str]

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> C:
        raise NotImplementedError

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        raise NotImplementedError

    def executemany(self, name: str, params: Sequence[Params]) -> int:
        return self.sql_many(self.queries[name], params)

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> C:
        return self.sql(self.queries[name], params)

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        return self.execute(name, params).fetchone()

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self.execute(name, params).fetchall()


class Database(Protocol):
    backend: str  # "sqlite" or "postgres"
    cipher: Cipher

    def transaction(self) -> AbstractContextManager[Tx]: ...

    def reading(self) -> AbstractContextManager[Tx]:
        """A transaction that only reads: it takes no write lock, so a long read (a page
        of 100,000 ledger rows: 0.4 s) neither waits for the writer nor holds it up. On
        SQLite a deferred BEGIN beside the one writer (WAL); elsewhere a transaction.
        Nothing may be written in it."""
        ...

    def close(self) -> None: ...
