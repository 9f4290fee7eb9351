"""A benchmark module for tests/bench/test_isolation.py: one row naming the process that
ran it, and whether this interpreter ran a benchmark module before."""

from __future__ import annotations

import os

from bench._report import Row, row

_RUNS: list[int] = []


def run() -> list[Row]:
    _RUNS.append(os.getpid())
    runs = len(_RUNS)
    return [row("pid", os.getpid(), runs, unit="pid", baseline_name="runs", target="-", ok=True)]
