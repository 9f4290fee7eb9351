"""How the operations figures are read: one read transaction and its counting rule, exact
or, on a large PostgreSQL table, capped and then the planner's estimate (``Reader``), over
the named statements of ``storage/sql/<backend>/ops.sql`` (``OPS``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pigeon.storage.base import Tx
from pigeon.storage.queries import QuerySet

OPS = QuerySet("ops")  # the operations reads, one .sql file per backend


@dataclass
class Reader:
    """One read transaction and how it counts: exactly, or capped then estimated."""

    tx: Tx
    now: float
    capped: bool
    cap: int
    estimated: list[str]

    def sql(self, name: str) -> str:
        return OPS.text(self.tx, name)

    def all(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.tx.sql(self.sql(name), params).fetchall()
        return rows

    def one(self, name: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self.tx.sql(self.sql(name), params).fetchone()
        return row

    def count(self, name: str, params: Mapping[str, Any], label: str) -> int:
        """How many rows ``rows_<name>`` selects: exact, or on a large table past the cap
        the planner's estimate (``label`` then goes to ``estimated``). The planner is asked
        first: far past the cap, its estimate is taken without counting at all."""
        rows = self.sql(f"rows_{name}")
        if not self.capped:
            found = self.tx.sql(f"SELECT count(*) AS n FROM ({rows}) AS t", params).fetchone()
            return int(found["n"])
        estimate = self.estimate(rows, params)
        if estimate > 2 * self.cap:
            self.estimated.append(label)
            return estimate
        found = self.tx.sql(
            f"SELECT count(*) AS n FROM ({rows} LIMIT {self.cap + 1}) AS t", params
        ).fetchone()
        n = int(found["n"])
        if n <= self.cap:
            return n
        self.estimated.append(label)
        return max(estimate, n)

    def estimate(self, rows: str, params: Mapping[str, Any]) -> int:
        plan = self.tx.sql(f"EXPLAIN (FORMAT JSON) {rows}", params).fetchone()
        return int(_plan_rows(plan))


def _plan_rows(row: Mapping[str, Any]) -> float:
    (value,) = row.values()
    plan = json.loads(value) if isinstance(value, str) else value
    return float(plan[0]["Plan"]["Plan Rows"])
