"""Named SQL blocks: ``-- name: some_query`` starts a block, the next one ends it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the annotations only: this module stays a leaf at run time
    from pigeon.storage.base import Tx

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# A block of QuerySet.run_rows that takes its rows as one JSON array names it ``rows``.
_ROWS = re.compile(r":rows\b|%\(rows\)s")


def parse_queries(text: str, origin: str = "<string>") -> dict[str, str]:
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {origin}")
        queries[name] = body.strip()
    return queries


LIBRARY = "pigeon.storage"  # the package whose sql/ folder holds the library's own files


@cache
def load_queries(backend: str, component: str, package: str = LIBRARY) -> dict[str, str]:
    """The named queries of one component (``intake``, ``jobs``, ``edge`` ...) for a backend,
    from ``<package>/sql/<backend>/<component>.sql`` (a component outside the library, such
    as the reference application, keeps its files in its own package)."""
    resource = resources.files(package).joinpath("sql", backend, f"{component}.sql")
    return parse_queries(resource.read_text(encoding="utf-8"), f"{backend}/{component}.sql")


def migrations(backend: str, component: str, package: str = LIBRARY) -> list[tuple[int, str]]:
    """Numbered migration scripts ``<package>/sql/<backend>/migrations/<component>_NNNN.sql``
    in order."""
    folder = resources.files(package).joinpath("sql", backend, "migrations")
    found: list[tuple[int, str]] = []
    if not folder.is_dir():  # a backend with no migrations yet (git keeps no empty folder)
        return found
    for entry in folder.iterdir():
        name = entry.name
        if name.startswith(component + "_") and name.endswith(".sql"):
            number = int(name[len(component) + 1 : -4])
            found.append((number, entry.read_text(encoding="utf-8")))
    found.sort()
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise RuntimeError(f"migrations for {backend}/{component} are not 1..n: {numbers}")
    return found


def _as_array(rows: Sequence[Sequence[Any]], shared: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of a block that takes ``rows`` as one JSON array (``_takes_array``)."""
    return {**shared, "rows": json.dumps(rows)}


@cache
def _takes_array(text: str) -> bool:
    """Does the statement (its comments aside) name the parameter ``rows``?"""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return _ROWS.search(code) is not None


class QuerySet:
    """One component's named SQL blocks, chosen for the backend of the transaction that
    runs them: the one place that reads ``tx.backend`` for a component whose statements
    run through ``Tx.sql`` (its queries are not in the database's own set). Domain code
    asks for a statement by name and never names a backend.

    ``OPS = QuerySet("ops")`` at module level; ``OPS.run(tx, "action_log", {...})``. A
    component outside the library names the package that holds its ``sql/`` folder."""

    def __init__(self, component: str, package: str = LIBRARY) -> None:
        self.component = component
        self.package = package

    def text(self, tx: Tx, name: str) -> str:
        """The SQL of ``name`` for ``tx``'s backend; a ``KeyError`` naming the file if it
        has no such block."""
        queries = load_queries(tx.backend, self.component, self.package)
        try:
            return queries[name]
        except KeyError:
            raise KeyError(f"no query {name!r} in {tx.backend}/{self.component}.sql") from None

    def has(self, tx: Tx, name: str) -> bool:
        """Has ``tx``'s backend a statement ``name`` (one backend doing in one statement
        what another does in two)?"""
        return name in load_queries(tx.backend, self.component, self.package)

    def run_later(self, tx: Tx, name: str, params: Mapping[str, Any]) -> None:
        """``name`` run in ``tx``, its result unread: sent with the transaction's next
        round trip where it can hold it back (PostgreSQL's own, ``defer``), else now. For
        a statement that cannot fail on its own (see `PostgresTx.defer`)."""
        defer = getattr(tx, "defer", None)
        if defer is None:
            self.run(tx, name, params)
        else:
            defer(self.text(tx, name), params)

    def run(self, tx: Tx, name: str, params: Mapping[str, Any] | None = None) -> Any:
        """``name`` run in ``tx``; the driver's cursor (rows as dicts), as ``Tx.sql``."""
        return tx.sql(self.text(tx, name), params)

    def run_rows(
        self, tx: Tx, name: str, rows: Sequence[Sequence[Any]], shared: Mapping[str, Any]
    ) -> int:
        """``name`` written for each of ``rows`` (each the values its block lists, in that
        order) with the ``shared`` named values, in the shape the backend's block takes;
        the rows it changed. A block that names ``rows`` gets them as one JSON array, in
        one statement (PostgreSQL's: one statement costs its server least); any other is
        one row's statement, stepped for each row by ``Tx.sql_many`` with the row's values
        and then the shared ones, in the order given, as numbered parameters (SQLite's:
        its ``json_each`` parses an element again for each value read out of it)."""
        text = self.text(tx, name)
        if _takes_array(text):
            return int(tx.sql(text, _as_array(rows, shared)).rowcount)
        tail = tuple(shared.values())
        return tx.sql_many(text, [(*row, *tail) for row in rows])

    def run_rows_later(
        self, tx: Tx, name: str, rows: Sequence[Sequence[Any]], shared: Mapping[str, Any]
    ) -> None:
        """``run_rows``, its count unread: a block that takes the rows as one array is sent
        with the transaction's next round trip where it can hold it back (``run_later``),
        any other is stepped now. For rows that cannot fail on their own (see
        `PostgresTx.defer`), such as an append-only log's."""
        if _takes_array(self.text(tx, name)):
            self.run_later(tx, name, _as_array(rows, shared))
        else:
            self.run_rows(tx, name, rows, shared)
