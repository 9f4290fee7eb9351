"""Counting what requests and jobs left in the server database, and waiting for the jobs.

A ``Tally`` is the count of every table a rehearsal compares at one moment (pigeon's
records, obligations, jobs, effects and outbox, and the app's own tables); the difference
of two is what happened between them. ``Ledger`` reads them from the database, with what
the requests of one principal prefix left (records, jobs and how each job ended).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pigeon.storage.base import Database, Tx
from pigeon.storage.queries import QuerySet

SQL = QuerySet("rehearse", package="pigeon.rehearse")
# pigeon's tables, compared
TABLES = ("records", "obligations", "jobs", "effects", "outbox", "provider_calls")
STATES = (
    "open_jobs", "succeeded_jobs", "unpublished", "failed_with_owner", "failed_without_owner"
)  # fmt: skip


@dataclass(frozen=True)
class Tally:
    """Rows per compared table (``rows``) and the jobs' and outbox's states (``states``)."""

    rows: Mapping[str, int]
    states: Mapping[str, int] = field(default_factory=dict)

    def __sub__(self, other: Tally) -> Tally:
        return Tally(
            {t: n - other.rows.get(t, 0) for t, n in self.rows.items()},
            {s: n - other.states.get(s, 0) for s, n in self.states.items()},
        )


@dataclass
class Ledger:
    """Reads of ``db``; ``tables``: the app's own, counted beside pigeon's; ``counters``:
    what it keeps elsewhere (`RehearsalHooks.counters`)."""

    db: Database
    tables: tuple[str, ...] = ()
    counters: Mapping[str, Callable[[], int]] = field(default_factory=dict)

    def tally(self) -> Tally:
        with self.db.transaction() as tx:
            row = SQL.run(tx, "tally").fetchone()
            own = {t: self._rows(tx, t) for t in self.tables}
        own |= {name: int(count()) for name, count in self.counters.items()}
        return Tally(
            {t: int(row[t]) for t in TABLES} | own,
            {s: int(row[s]) for s in STATES},
        )

    @staticmethod
    def _rows(tx: Tx, table: str) -> int:
        """Rows of the app's ``table``; none while it does not exist (an app may make it
        when it first writes)."""
        if SQL.run(tx, "table_exists", {"name": table}).fetchone() is None:
            return 0
        return int(tx.sql(f'SELECT count(*) AS n FROM "{table}"').fetchone()["n"])

    def records_of(self, prefix: str) -> dict[str, int]:
        """Records per principal starting with ``prefix``."""
        with self.db.transaction() as tx:
            rows = SQL.run(tx, "records_of", {"prefix": prefix}).fetchall()
        return {r["principal"]: int(r["n"]) for r in rows}

    def jobs_of(self, prefix: str) -> list[dict[str, Any]]:
        """The jobs of the records of principals starting with ``prefix``: id, queue, task,
        status, owner, last error, principal and how many attempts succeeded."""
        with self.db.transaction() as tx:
            rows: list[dict[str, Any]] = SQL.run(tx, "jobs_of", {"prefix": prefix}).fetchall()
        return rows

    def open_jobs(self) -> int:
        return int(self.tally().states["open_jobs"])

    def drain(self, timeout: float, *, poll: float = 0.1) -> float | None:
        """Seconds until no job is queued or reserved; None if some still are at ``timeout``."""
        start = time.monotonic()
        while True:
            if self.open_jobs() == 0:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                return None
            time.sleep(poll)
