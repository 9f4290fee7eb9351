"""The PostgreSQL intake bench's CPU row (bench/_raw_cpu.py): each side writes every batch
whole, and each gives a CPU figure an operation."""

from __future__ import annotations

import contextlib
import math
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from bench._raw_batch import creates

from bench import _raw_cpu

TABLES = ("pigeon_idempotency_claims", "ref_notes", "ref_effect_ledger")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_each_side_writes_every_batch_whole(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    planned = creates(_raw_cpu.WARM + 3, 10, "cpu")
    if backend == "sqlite":
        db = str(tmp_path / "cpu.db")
        side = _raw_cpu._sqlite(db)
    else:
        db = request.getfixturevalue("pg_url")
        side = _raw_cpu._postgres(db)
    per_op = _raw_cpu._cpu_per_op(side, planned)
    assert math.isfinite(per_op) and per_op > 0
    conn: Any = sqlite3.connect(db) if backend == "sqlite" else psycopg.connect(db)
    with contextlib.closing(conn):
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    assert counts == dict.fromkeys(TABLES, len(planned) * 10)


@pytest.mark.usefixtures("pg_url")  # PostgreSQL up, or the test skipped as the others
def test_measure_gives_each_backend_its_cpu_an_operation() -> None:
    lite, pg = _raw_cpu.measure(2, 10)
    assert lite > 0 and pg > 0
    assert math.isfinite(lite) and math.isfinite(pg)
