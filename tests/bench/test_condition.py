"""The machine's condition printed with every benchmark run (bench/_condition.py): real
figures from a real disk and a real floor server, and a line that names each of them."""

from __future__ import annotations

import math
import os

from bench._condition import Condition, measure

from tests import processes


def test_the_condition_is_measured_and_named() -> None:
    condition = measure(inserts=5, requests=5, spawn=processes.spawn)
    figures = [condition.sqlite_inserts, condition.floor_requests, *condition.load]
    assert all(math.isfinite(f) for f in figures)
    assert condition.sqlite_inserts > 0 and condition.floor_requests > 0
    assert all(f >= 0 for f in condition.load) and condition.cpus == os.cpu_count()
    line = condition.markdown()
    assert f"raw sqlite3 {condition.sqlite_inserts:,.0f} inserts/s" in line
    assert f"floor {condition.floor_requests:,.0f} req/s" in line
    one, five, fifteen = condition.load
    assert f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {condition.cpus} CPUs" in line


def test_the_line_carries_the_figures_it_was_given() -> None:
    line = Condition(1234.4, 616.0, (0.5, 1.25, 3.0), 2).markdown()
    assert "raw sqlite3 1,234 inserts/s" in line and "floor 616 req/s" in line
    assert "load average 0.50 1.25 3.00 on 2 CPUs" in line
