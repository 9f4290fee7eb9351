"""Key rotation without downtime: ``pigeon keys rotate`` and ``pigeon keys status``.

Rotation re-seals, under the keyring's current key, every value of the sealed columns
(`pigeon.storage.sealed`) that is not already under it: values under older keys, and
values written in clear before a key was configured. It walks each table in primary-key
order, ``batch`` rows per short transaction, so it holds no lock for long and can run
while the server and the workers run:

- each update is a compare-and-set on the value it read: a row the server rewrote in the
  meantime (already under the current key, since the server seals with it) is skipped,
  never overwritten with older content;
- it is resumable: a value under the current key is never selected again, so a run that
  was stopped starts over from the beginning and only finds what is left.

A value that cannot be opened (its key is not in the keyring, or it fails authentication)
is left as it is and counted: the run reports it and carries on with the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pigeon.storage.base import Database, Tx
from pigeon.storage.crypto import SEALED, CiphertextInvalid, KeyMissing
from pigeon.storage.schema import table_exists
from pigeon.storage.sealed import SERVER_COLUMNS, SealedColumn

DEFAULT_BATCH = 500
CLEAR = "(clear)"  # the status line of values stored without a key


def _p(backend: str, name: str) -> str:
    return f":{name}" if backend == "sqlite" else f"%({name})s"


def _kid_expr(backend: str, column: str) -> str:
    """The key id of a sealed value in SQL ('' for a clear one)."""
    if backend == "sqlite":
        kid = f"substr({column}, 5, instr(substr({column}, 5), ':') - 1)"
    else:
        kid = f"split_part({column}, ':', 2)"
    return f"CASE WHEN substr({column}, 1, 4) = '{SEALED}' THEN {kid} ELSE '' END"


def status(
    db: Database, columns: Iterable[SealedColumn] = SERVER_COLUMNS
) -> dict[str, Counter[str]]:
    """Values per key id (``CLEAR`` for unsealed ones) in each sealed column."""
    found: dict[str, Counter[str]] = {}
    with db.transaction() as tx:
        for col in columns:
            counts: Counter[str] = Counter()
            found[col.name] = counts
            if not table_exists(tx, col.table):  # a component not attached here
                continue
            statement = (
                f"SELECT {_kid_expr(tx.backend, col.column)} AS kid, count(*) AS n "
                f"FROM {col.table} WHERE {col.column} IS NOT NULL GROUP BY 1"
            )
            for row in tx.sql(statement).fetchall():
                counts[row["kid"] or CLEAR] += int(row["n"])
    return found


@dataclass
class ColumnReport:
    resealed: int = 0
    skipped: int = 0  # changed by someone else between the read and the write
    missing: Counter[str] = field(default_factory=Counter)  # key id -> values left as they are
    invalid: int = 0  # failed authentication: left as they are


def _select(backend: str, col: SealedColumn, after: tuple[Any, ...] | None) -> str:
    keys = ", ".join(col.key)
    names = list(dict.fromkeys((*col.key, *col.bound)))
    where = [
        f"{col.column} IS NOT NULL",
        f"substr({col.column}, 1, {_p(backend, 'plen')}) <> {_p(backend, 'prefix')}",
    ]
    if after is not None:
        marks = ", ".join(_p(backend, f"k{i}") for i in range(len(col.key)))
        where.append(f"({keys}) > ({marks})")
    return (
        f"SELECT {', '.join(names)}, {col.column} AS value FROM {col.table} "
        f"WHERE {' AND '.join(where)} ORDER BY {keys} LIMIT {_p(backend, 'n')}"
    )


def _update(backend: str, col: SealedColumn) -> str:
    match = " AND ".join(f"{k} = {_p(backend, f'k{i}')}" for i, k in enumerate(col.key))
    return (
        f"UPDATE {col.table} SET {col.column} = {_p(backend, 'new')} "
        f"WHERE {match} AND {col.column} = {_p(backend, 'old')}"
    )


def _batch(
    tx: Tx, col: SealedColumn, after: tuple[Any, ...] | None, n: int, report: ColumnReport
) -> tuple[Any, ...] | None:
    """Re-seal up to ``n`` rows after the key ``after``; the last key seen, None at the end."""
    cipher = tx.cipher
    assert cipher.keyring is not None
    prefix = f"{SEALED}{cipher.keyring.current}:"
    params: dict[str, Any] = {"plen": len(prefix), "prefix": prefix, "n": n}
    if after is not None:
        params.update({f"k{i}": v for i, v in enumerate(after)})
    rows = tx.sql(_select(tx.backend, col, after), params).fetchall()
    update = _update(tx.backend, col)
    last = None
    for row in rows:
        last = tuple(row[k] for k in col.key)
        ad = col.ad_of(row)
        try:
            clear = cipher.open(row["value"], *ad)
        except KeyMissing as exc:
            report.missing[exc.kid] += 1
            continue
        except CiphertextInvalid:
            report.invalid += 1
            continue
        keys = {f"k{i}": v for i, v in enumerate(last)}
        done = tx.sql(update, {**keys, "new": cipher.seal(clear, *ad), "old": row["value"]})
        if getattr(done, "rowcount", 0):
            report.resealed += 1
        else:
            report.skipped += 1
    return last if len(rows) == n else None


def rotate(
    db: Database,
    *,
    batch: int = DEFAULT_BATCH,
    columns: Iterable[SealedColumn] = SERVER_COLUMNS,
    progress: Callable[[str, ColumnReport], None] | None = None,
) -> dict[str, ColumnReport]:
    """Re-seal every value not under the current key, one short transaction per batch."""
    if db.cipher.keyring is None:
        raise ValueError("rotation needs a keyring (the new key first)")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    reports: dict[str, ColumnReport] = {}
    for col in columns:
        report = reports[col.name] = ColumnReport()
        with db.transaction() as tx:
            if not table_exists(tx, col.table):  # a component not attached here
                continue
        after: tuple[Any, ...] | None = None
        while True:
            with db.transaction() as tx:
                after = _batch(tx, col, after, batch, report)
            if progress is not None:
                progress(col.name, report)
            if after is None:
                break
    return reports
