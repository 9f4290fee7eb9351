"""pigeon's ``Tx`` over any DB-API 2.0 connection whose parameter style is the backend's
(``:name`` for SQLite, ``%(name)s`` for PostgreSQL): the synchronous adapters SQLAlchemy
puts over asyncio drivers (psycopg's ``AsyncConnection``, aiosqlite) inside
``AsyncSession.run_sync``, which answer plain tuples and know no ``conn.transaction()``.
Rows come back as dicts by the cursor's description; savepoints are SQL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pigeon.storage.base import NamedStatements, Params
from pigeon.storage.crypto import PLAIN, Cipher

Row = dict[str, Any]


class DictCursor:
    """A finished statement's rows, as dicts (``Tx.sql`` returns one)."""

    def __init__(self, cursor: Any) -> None:
        description = cursor.description
        self.rowcount: int = cursor.rowcount
        names = [col[0] for col in description] if description else []
        rows = cursor.fetchall() if description else []
        self._rows: list[Row] = [dict(zip(names, row, strict=True)) for row in rows]

    def fetchone(self) -> Row | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return rows


class DbapiTx(NamedStatements[DictCursor]):
    """An open transaction the application holds on ``conn`` (it commits or rolls back)."""

    def __init__(
        self, conn: Any, backend: str, queries: Mapping[str, str], cipher: Cipher = PLAIN
    ) -> None:
        self.conn = conn
        self.backend = backend
        self.queries = queries
        self.cipher = cipher
        self._depth = 0

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        cursor = self.conn.cursor()
        try:
            cursor.executemany(statement, params)
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> DictCursor:
        cursor = self.conn.cursor()
        try:
            cursor.execute(statement, dict(params or {}))
            return DictCursor(cursor)
        finally:
            cursor.close()

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        self._depth += 1
        name = f"pigeon_sp_{self._depth}"
        try:
            self.sql(f"SAVEPOINT {name}")
            try:
                yield
            except BaseException:
                self.sql(f"ROLLBACK TO SAVEPOINT {name}")
                self.sql(f"RELEASE SAVEPOINT {name}")
                raise
            self.sql(f"RELEASE SAVEPOINT {name}")
        finally:
            self._depth -= 1
